"""The lab engine: requests in, a scheduler loop on an injected clock, streams out. No I/O.

Steps follow a plan in clock time: step ``i+1`` is planned at step ``i``'s planned start plus
its duration, so the schedule depends only on the scenario, the seed and the arrival times,
not on how late the event loop woke up. (The lag, actual start minus planned, is measured;
past ``lag_reset_ms`` the plan is re-anchored to now and the run is no longer reproducible.)
A request that arrives during a step joins at the next boundary; when the engine is idle it
wakes at the arrival.

Everything random about a client request is drawn at arrival from a generator seeded with
``(seed, 0, arrival ordinal)``; background requests use ``(seed, 1, their ordinal)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from steadystream._clock import Clock, MonotonicClock
from steadystream._exceptions import ConfigError
from steadystream._tasks import cancel_and_wait
from steadystream.lab.causes import Cause, charge
from steadystream.lab.emission import Emitter
from steadystream.lab.faults import FaultSpec
from steadystream.lab.network import ConnectionModel
from steadystream.lab.scenario import Scenario
from steadystream.lab.scheduler import Scheduler
from steadystream.lab.sequence import LabRequest, Sequence, spec_decode_plan
from steadystream.lab.stream import Ending, StreamHandle
from steadystream.lab.text import pseudo_text
from steadystream.lab.truth import RequestTruth, TruthStore

if TYPE_CHECKING:
    from steadystream.lab.metrics import LabMetrics

__all__ = ["LabEngine"]

_MS = 1_000_000
_LAG_SAMPLES = 1 << 16
_CLIENTS, _BACKGROUND = 0, 1  # seed-sequence branches


class LabEngine:
    """A simulated continuous-batching engine. ``await start()``, ``submit()``, ``await stop()``."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int = 0,
        clock: Clock | None = None,
        metrics: LabMetrics | None = None,
        on_done: Callable[[RequestTruth], None] | None = None,
    ) -> None:
        if seed < 0:  # numpy seeds its generators from non-negative integers only
            raise ConfigError(f"the lab's seed must be 0 or more, got {seed}")
        self.scenario = scenario
        self.seed = seed
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.metrics = metrics
        self.on_done = on_done
        self.truths = TruthStore(scenario.server.keep_requests)
        self.scheduler = Scheduler(
            scenario,
            self.clock,
            metrics=metrics,
            on_retired=self._retired,
            make_background=self._background,
        )
        self._label_min_ns = round(scenario.label_min_ms * _MS)
        self._lag_reset_ns = round(scenario.scheduler.lag_reset_ms * _MS)
        self._live: dict[StreamHandle, Sequence] = {}
        self._keys = 0
        self._clients = 0
        self._backgrounds = 0
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self.start_ns: int | None = None
        self.lag_resets = 0
        self._lags = np.zeros(_LAG_SAMPLES, dtype=np.int64)
        self._lag_count = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler loop on the running event loop."""
        if self._task is None:
            self.start_ns = self.clock.now_ns()
            self.scheduler.start_background(self.start_ns)
            self._task = asyncio.get_running_loop().create_task(self._run(self.start_ns))

    async def stop(self) -> None:
        """End every open stream (as a shutdown) and stop the loop."""
        self._closing = True
        self.scheduler.retire_all(self.clock.now_ns(), Ending.SHUTDOWN)
        task, self._task = self._task, None
        await cancel_and_wait(task)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._closing

    # -- requests -------------------------------------------------------------------------------

    @property
    def capacity_tokens(self) -> int:
        """The longest sequence (prompt and answer) the KV cache can hold."""
        return self.scheduler.capacity_tokens

    def submit(self, request: LabRequest) -> StreamHandle:
        """A request arrives now. Returns the handle its writer reads from."""
        if self._closing:
            raise RuntimeError("the lab engine is stopping")
        now = self.clock.now_ns()
        ordinal = self._clients
        self._clients += 1
        rng = np.random.default_rng([self.seed, _CLIENTS, ordinal])
        out = self.scenario.output
        natural = int(rng.integers(out.min_tokens, out.max_tokens + 1))
        target, ending = natural, Ending.STOP
        if request.max_tokens is not None and (request.ignore_eos or request.max_tokens < natural):
            target, ending = request.max_tokens, Ending.LENGTH
        room = self.capacity_tokens - request.prompt_tokens
        if target > room:
            target, ending = max(room, 0), Ending.LENGTH
        # The scenario's fault draw happens whether or not a header overrides it, so a
        # request's text and pauses do not depend on the header being there.
        params = self.scenario.faults
        drawn = FaultSpec.from_params(params) if rng.random() < params.share else FaultSpec()
        faults = request.faults if request.faults is not None else drawn
        end_after = faults.end_after
        if end_after is not None and end_after < target:
            target = end_after
            ending = Ending.RESET if faults.reset_after is not None else Ending.ERROR
        truth = RequestTruth(
            request_id=request.request_id,
            model=request.model,
            endpoint=request.endpoint,
            stream=request.stream,
            ordinal=ordinal,
            arrival_ns=now,
            prompt_tokens=request.prompt_tokens,
            target_tokens=target,
            fault=faults.describe(),
        )
        pieces = pseudo_text(rng, target)
        seq = self._sequence(now, request.prompt_tokens, target, ending, rng)
        seq.ready_ns = now + faults.slow_first_token_ns
        charge(seq.extras, Cause.INJECTED_FAULT, faults.slow_first_token_ns)
        seq.stall_after = faults.stall_after
        seq.stall_ns = faults.stall_ns
        seq.truth = truth
        seq.emitter = Emitter(self.scenario.emission, ConnectionModel(self.scenario.network, rng))
        handle = StreamHandle(self, truth, pieces, self.clock, self._label_min_ns, faults)
        seq.handle = handle
        self.truths.add(truth)
        self._live[handle] = seq
        self.scheduler.enter(seq)
        self._wake()
        return handle

    def cancel(self, handle: StreamHandle) -> None:
        """The client of ``handle`` went away, noticed now: free its KV at the next boundary."""
        truth = handle.truth
        if truth.engine_done or truth.disconnect_noticed_ns is not None:
            return
        now = self.clock.now_ns()
        truth.disconnect_noticed_ns = now
        seq = self._live.get(handle)
        if seq is not None:
            self.scheduler.cancel(seq, now)
        self._wake()

    def request_progress(self, handle: StreamHandle) -> None:
        """The writer is finished with ``handle``; report the request once all is done."""
        self._report(handle.truth)

    def truth(self, request_id: str) -> RequestTruth | None:
        """The ground truth of a request (None once it has been dropped or if unknown)."""
        return self.truths.get(request_id)

    # -- state for metrics, benchmarks and tests --------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return self.scheduler.num_waiting

    @property
    def kv_usage(self) -> float:
        return self.scheduler.kv_usage

    def lag_samples(self) -> npt.NDArray[np.int64]:
        """Recent scheduling lags (actual step start minus planned) in ns, oldest first."""
        count = self._lag_count
        if count <= _LAG_SAMPLES:
            return self._lags[:count].copy()
        return np.roll(self._lags, -(count % _LAG_SAMPLES))

    def reset_lag_samples(self) -> None:
        self._lag_count = 0

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self, start_ns: int) -> None:
        clock = self.clock
        scheduler = self.scheduler
        metrics = self.metrics
        loop = asyncio.get_running_loop()
        planned = start_ns
        while not self._closing:
            scheduler.boundary(planned)
            duration = scheduler.plan_step(planned)
            if duration is None:
                planned = await self._idle(planned)
                continue
            # The writers woken by this boundary run next, in one burst. libuv (uvloop) computes
            # its poll timeout from a clock cached before that burst and so would wake us late
            # by the burst's length; reading the loop's time after the burst refreshes it.
            loop.call_soon(loop.time)
            planned += duration
            await clock.sleep_until(planned)
            lag = clock.now_ns() - planned
            self._lags[self._lag_count % _LAG_SAMPLES] = lag
            self._lag_count += 1
            if metrics is not None:
                metrics.lag.observe(lag / 1e9)
            if lag > self._lag_reset_ns:
                # Too far behind to catch up step by step: re-anchor the plan to now.
                planned += lag
                self.lag_resets += 1
                if metrics is not None:
                    metrics.lag_resets.inc()

    async def _idle(self, last_ns: int) -> int:
        """Wait for work; return the planned time of the boundary that takes it up."""
        loop = asyncio.get_running_loop()
        deadline = self.scheduler.next_timed_wake()
        self._wakeup = loop.create_future()
        timer = loop.create_task(self._wake_at(deadline)) if deadline is not None else None
        try:
            await self._wakeup
        finally:
            self._wakeup = None
            if timer is not None:
                timer.cancel()
        now = self.clock.now_ns()
        scheduler = self.scheduler
        due = [s.ready_ns for s in scheduler.arrivals if s.ready_ns <= now]
        due += [s.cancel_noticed_ns for s in scheduler.cancels if s.cancel_noticed_ns is not None]
        if deadline is not None and deadline <= now:
            due.append(deadline)
        return max(last_ns, min(due) if due else now)

    async def _wake_at(self, deadline: int) -> None:
        await self.clock.sleep_until(deadline)
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    # -- helpers --------------------------------------------------------------------------------

    def _sequence(
        self, arrival: int, prompt: int, target: int, ending: Ending, rng: np.random.Generator
    ) -> Sequence:
        seq = Sequence(self._keys, arrival, arrival, prompt, target, ending)
        self._keys += 1
        if self.scenario.spec_decode.enabled:
            seq.spec_tokens, seq.spec_accepted = spec_decode_plan(
                rng, target, self.scenario.spec_decode
            )
        return seq

    def _background(self, at_ns: int) -> Sequence:
        bg = self.scenario.background
        rng = np.random.default_rng([self.seed, _BACKGROUND, self._backgrounds])
        self._backgrounds += 1
        target = min(bg.output_tokens, max(self.capacity_tokens - bg.prompt_tokens, 0))
        return self._sequence(at_ns, bg.prompt_tokens, target, Ending.LENGTH, rng)

    def _retired(self, seq: Sequence) -> None:
        if seq.handle is not None:
            self._live.pop(seq.handle, None)
        if seq.truth is not None:
            self._report(seq.truth)

    def _report(self, truth: RequestTruth) -> None:
        if truth.done and self.on_done is not None:
            self.on_done(truth)
