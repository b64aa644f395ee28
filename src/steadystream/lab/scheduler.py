"""The scheduler's logic: what happens at a step boundary and what the next step does.

Pure and synchronous: it is told the planned time of each boundary (and reads the clock only
to stamp when KV was really freed), so tests can drive it step by step. The asynchronous
loop that calls it in real or simulated time is :class:`~steadystream.lab.engine.LabEngine`.

At each boundary, in order: deliver the last step's tokens; drop cancelled sequences (their
KV is freed here, within one step of the disconnect); un-park stalls; take arrivals; preempt
the newest sequences if the step would overflow the KV cache; admit from the queue (FCFS,
up to the admission limit, while the prompt's blocks fit under a 1% watermark); plan the
step. Delay beyond plain decoding is charged to its cause as it happens (see ``causes``):

- waiting in the queue: ``queueing`` (``kv-preemption`` after an eviction), whole steps;
- a step stretched by other sequences' prefill: that prefill time, ``prefill-interference``;
- recompute after eviction: the own prefill time, and whole steps that make no token;
- an empty step after a rejected draft: the whole step, ``spec-decode-rejection``;
- a stall or slow first token: its length, ``injected-fault``.

A sequence's own first prefill is its time to first token, not a pause: it is not charged.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from steadystream._clock import Clock
from steadystream.lab.causes import Cause, charge
from steadystream.lab.scenario import Scenario
from steadystream.lab.sequence import FOREVER, Phase, Sequence
from steadystream.lab.stream import Ending

if TYPE_CHECKING:
    from steadystream.lab.metrics import LabMetrics

__all__ = ["Scheduler"]

_MS = 1_000_000


class Scheduler:
    """Queues, batch and KV cache of one lab engine."""

    def __init__(
        self,
        scenario: Scenario,
        clock: Clock,
        *,
        metrics: LabMetrics | None = None,
        on_retired: Callable[[Sequence], None] | None = None,
        make_background: Callable[[int], Sequence] | None = None,
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.metrics = metrics
        self.on_retired = on_retired
        self.make_background = make_background
        s = scenario.scheduler
        self._base_ns = round(s.step_base_ms * _MS)
        self._per_seq_ns = round(s.step_per_seq_ms * _MS)
        self._per_prefill_token_ns = s.prefill_per_token_ms * _MS
        self._chunk = s.prefill_chunk_tokens if s.chunked_prefill else None
        self._max_running = s.max_running
        kv = scenario.kv_cache
        self._block_tokens = kv.block_tokens
        self._total_blocks = kv.total_blocks
        self._watermark = max(1, kv.total_blocks // 100)
        spec = scenario.spec_decode
        self._spec_cost_ns = (
            round(spec.draft_tokens * spec.draft_cost_ms * _MS) if spec.enabled else 0
        )
        bg = scenario.background
        self._bg_every_ns = round(bg.every_ms * _MS)
        self.bg_next_ns: int | None = None
        self.bg_alive = 0
        self.arrivals: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admitted: prefilling, decoding or parked
        self.parked: list[Sequence] = []
        self._retired_running = False
        self._in_flight: list[Sequence] = []
        self.cancels: list[Sequence] = []
        self.used_blocks = 0
        self.steps = 0
        self.preemptions = 0

    def start_background(self, start_ns: int) -> None:
        if self._bg_every_ns and self.make_background is not None:
            self.bg_next_ns = start_ns + round(self.scenario.background.first_at_ms * _MS)

    @property
    def capacity_tokens(self) -> int:
        """The longest sequence (prompt and answer) the KV cache can hold."""
        return (self._total_blocks - 1) * self._block_tokens

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.arrivals)

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self._total_blocks

    def enter(self, seq: Sequence) -> None:
        """A new sequence: it joins the queue at the first boundary at or after its ready time."""
        self.arrivals.append(seq)

    def cancel(self, seq: Sequence, noticed_ns: int) -> None:
        if seq.phase is not Phase.DONE and seq.cancel_noticed_ns is None:
            seq.cancel_noticed_ns = noticed_ns
            self.cancels.append(seq)

    def retire_all(self, now: int, ending: Ending) -> None:
        for seq in [*self.arrivals, *self.waiting, *self.running]:
            self.retire(seq, now, ending)
        self.arrivals.clear()
        self.waiting.clear()
        self.running.clear()

    def next_timed_wake(self) -> int | None:
        """The next instant something is due while no step runs (arrival, un-park, background)."""
        times = [s.ready_ns for s in self.arrivals]
        times += [
            s.parked_until
            for s in self.parked
            if s.phase is Phase.PARKED and s.parked_until != FOREVER
        ]
        if self.bg_next_ns is not None:
            times.append(self.bg_next_ns)
        return min(times) if times else None

    # -- one boundary ---------------------------------------------------------------------------

    def boundary(self, now_planned: int) -> None:
        """Deliver the last step's tokens, drop cancelled sequences, take arrivals."""
        for seq in self._in_flight:
            self._deliver(seq, now_planned)
        self._in_flight.clear()
        if self.cancels:
            for seq in self.cancels:
                self.retire(seq, now_planned, Ending.CANCELLED)
            self.cancels.clear()
        if self._retired_running:
            self.running = [s for s in self.running if s.phase is not Phase.DONE]
            self._retired_running = False
        if self.parked:
            self._unpark(now_planned)
        self._take_arrivals(now_planned)

    def _unpark(self, now: int) -> None:
        still = []
        for seq in self.parked:
            if seq.phase is not Phase.PARKED:
                continue
            if seq.parked_until != FOREVER and seq.parked_until <= now:
                charge(seq.extras, Cause.INJECTED_FAULT, now - seq.since_ns)
                seq.phase = Phase.DECODE
            else:
                still.append(seq)
        self.parked = still

    def _take_arrivals(self, now: int) -> None:
        self._take_background(now)
        if not self.arrivals:
            return
        still = []
        for seq in self.arrivals:
            if seq.phase is Phase.DONE:
                continue
            if seq.ready_ns <= now:
                seq.phase = Phase.WAITING
                seq.since_ns = now
                self.waiting.append(seq)
            else:
                still.append(seq)
        self.arrivals = still

    def _take_background(self, now: int) -> None:
        """The background arrivals due by ``now``, in order: each arrives while fewer than
        ``max_alive`` are alive, the rest are skipped. Counted, not walked one by one: a
        short ``every_ms`` makes millions due in one step."""
        first, make = self.bg_next_ns, self.make_background
        if first is None or first > now or make is None:
            return
        every = self._bg_every_ns
        due = (now - first) // every + 1
        room = self.scenario.background.max_alive - self.bg_alive
        for i in range(min(due, max(room, 0))):
            self.bg_alive += 1
            self.arrivals.append(make(first + i * every))
        self.bg_next_ns = first + due * every

    def _deliver(self, seq: Sequence, now: int) -> None:
        n = seq.step_tokens
        seq.step_tokens = 0
        if seq.phase is Phase.DONE:
            return
        truth = seq.truth
        if seq.cancel_noticed_ns is not None:
            if truth is not None:
                truth.tokens_generated += n
                truth.tokens_after_disconnect += n
            return
        final = seq.phase is Phase.DECODE and seq.generated >= seq.target
        if truth is not None:
            if n:
                truth.tokens_generated += n
                if truth.first_token_ns is None:
                    truth.first_token_ns = now
            emitter, handle = seq.emitter, seq.handle
            if emitter is not None and handle is not None and (n or final):
                extras = seq.extras
                if extras:
                    seq.extras = {}
                events = emitter.feed(now, n, extras, final)
                if events:
                    handle.push(events)
        if final:
            self.retire(seq, now, seq.ending)
        elif seq.stall_after is not None and not seq.stalled and seq.generated >= seq.stall_after:
            seq.stalled = True
            seq.phase = Phase.PARKED
            seq.since_ns = now
            seq.parked_until = FOREVER if seq.stall_ns is None else now + seq.stall_ns
            self.parked.append(seq)

    def retire(self, seq: Sequence, now: int, ending: Ending) -> None:
        """Free the sequence's KV at the boundary planned at ``now``, end its stream, record."""
        if seq.phase is Phase.DONE:
            return
        if seq.phase is Phase.WAITING:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        elif seq.phase is not Phase.ARRIVING:
            self._retired_running = True
        seq.phase = Phase.DONE
        self.used_blocks -= seq.blocks
        seq.blocks = 0
        truth = seq.truth
        if truth is None:
            self.bg_alive -= 1
            return
        if ending is not Ending.CANCELLED:
            truth.finished_ns = now
        if truth.finish_reason is None:
            truth.finish_reason = ending.value
        truth.kv_freed_ns = self.clock.now_ns()
        truth.kv_freed_step_ns = now
        truth.engine_done = True
        if seq.handle is not None:
            seq.handle.end(ending, now)
        if self.on_retired is not None:
            self.on_retired(seq)

    # -- planning a step --------------------------------------------------------------------------

    def plan_step(self, now: int) -> int | None:
        """Preempt, admit and plan the step starting at ``now``; return its duration."""
        decoding = [(s, self._decode_tokens(s)) for s in self.running if s.phase is Phase.DECODE]
        growth = self._growth(decoding)
        while self.used_blocks + growth > self._total_blocks and len(self.running) > 1:
            victim = max(self.running, key=lambda s: s.key)
            self._preempt(victim, now)
            decoding = [(s, n) for s, n in decoding if s is not victim]
            growth = self._growth(decoding)
        self._admit(now, growth)
        prefilling, starved = self._plan_prefill()
        if not decoding and not prefilling:
            self._observe(0)
            return None
        prefill_tokens = sum(take for _, take in prefilling)
        spec = self._spec_cost_ns if decoding else 0
        prefill_ns = round(self._per_prefill_token_ns * prefill_tokens)
        batch = len(decoding) + len(prefilling)
        duration = self._base_ns + self._per_seq_ns * batch + prefill_ns + spec
        in_flight = self._in_flight
        drafts = draft_tokens = accepted = 0
        k = self.scenario.spec_decode.draft_tokens
        decoded = 0
        for seq, n in decoding:
            # A step whose draft was rejected wholly made this sequence no token: all of it
            # is lost, the part another request's prefill stretched it by to that prefill.
            if n == 0:
                charge(seq.extras, Cause.SPEC_DECODE_REJECTION, duration - prefill_ns)
            if prefill_ns:
                charge(seq.extras, Cause.PREFILL_INTERFERENCE, prefill_ns)
            plan = seq.spec_accepted
            if plan is not None and seq.spec_pos < len(plan):
                taken = plan[seq.spec_pos]
                seq.spec_pos += 1
                if taken >= 0:
                    drafts += 1
                    draft_tokens += k
                    accepted += min(taken, n - 1)
            seq.generated += n
            seq.step_tokens = n
            decoded += n
            in_flight.append(seq)
        for seq, take in prefilling:
            decoded += self._run_prefill(seq, take, prefill_tokens, duration, prefill_ns)
            in_flight.append(seq)
        for seq in starved:
            if seq.recompute and seq.generated:
                charge(seq.extras, Cause.KV_PREEMPTION, duration)
        self.steps += 1
        self._observe(prefill_tokens + decoded, prefill_tokens)
        if self.metrics is not None:
            self.metrics.observe_spec(drafts, draft_tokens, accepted)
        return duration

    def _growth(self, decoding: list[tuple[Sequence, int]]) -> int:
        """KV blocks the decoding sequences need beyond what they hold, for this step."""
        bt = self._block_tokens
        growth = 0
        for seq, n in decoding:
            if n:
                need = -(-(seq.prompt_tokens + seq.generated + n) // bt) - seq.blocks
                if need > 0:
                    growth += need
        return growth

    def _decode_tokens(self, seq: Sequence) -> int:
        """Tokens ``seq`` makes this step: 1, or its speculative-decoding plan's next entry."""
        plan = seq.spec_tokens
        n = plan[seq.spec_pos] if plan is not None and seq.spec_pos < len(plan) else 1
        left = seq.target - seq.generated
        if n > left:
            n = left
        if seq.stall_after is not None and not seq.stalled and seq.generated < seq.stall_after:
            n = min(n, seq.stall_after - seq.generated)
        return n

    def _preempt(self, seq: Sequence, now: int) -> None:
        """Evict ``seq`` to the front of the queue; it recomputes when readmitted."""
        self.running.remove(seq)
        self.used_blocks -= seq.blocks
        seq.blocks = 0
        seq.phase = Phase.WAITING
        seq.recompute = True
        seq.computed = 0
        seq.since_ns = now
        self.waiting.appendleft(seq)
        self.preemptions += 1
        if seq.truth is not None:
            seq.truth.preempted_ns.append(now)
        if self.metrics is not None:
            self.metrics.preemptions.inc()

    def _admit(self, now: int, growth: int) -> None:
        bt = self._block_tokens
        limit = self._total_blocks - self._watermark
        while self.waiting and len(self.running) < self._max_running:
            seq = self.waiting[0]
            target = seq.prompt_tokens + seq.generated
            need = -(-(target + 1) // bt)
            if self.used_blocks + growth + need > limit and self.running:
                break
            self.waiting.popleft()
            wait = now - seq.since_ns
            charge(seq.extras, Cause.KV_PREEMPTION if seq.recompute else Cause.QUEUEING, wait)
            seq.phase = Phase.PREFILL
            seq.prefill_target = target
            seq.computed = 0
            seq.blocks = need
            self.used_blocks += need
            self.running.append(seq)
            if seq.truth is not None:
                seq.truth.admitted_ns.append(now)

    def _plan_prefill(self) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        """Prefill work this step (FCFS within the chunk budget), and who got none."""
        budget = self._chunk
        planned: list[tuple[Sequence, int]] = []
        starved: list[Sequence] = []
        for seq in self.running:
            if seq.phase is not Phase.PREFILL:
                continue
            remaining = seq.prefill_target - seq.computed
            take = remaining if budget is None else min(remaining, budget)
            if take <= 0:
                starved.append(seq)
                continue
            if budget is not None:
                budget -= take
            planned.append((seq, take))
        return planned, starved

    def _run_prefill(
        self, seq: Sequence, take: int, prefill_tokens: int, duration: int, prefill_ns: int
    ) -> int:
        """Charge and advance one sequence's prefill; return the tokens it made (0 or 1)."""
        per_token = self._per_prefill_token_ns
        charge(seq.extras, Cause.PREFILL_INTERFERENCE, round(per_token * (prefill_tokens - take)))
        seq.computed += take
        completes = seq.computed >= seq.prefill_target
        if seq.recompute and seq.generated:
            own = round(per_token * take)
            # A chunk that completes the recompute makes a token: only its own prefill is extra.
            # One that does not is a whole step lost, less what others' prefill already took.
            lost = own if completes else duration - (prefill_ns - own)
            charge(seq.extras, Cause.KV_PREEMPTION, lost)
        n = 0
        if completes:
            seq.recompute = False
            seq.phase = Phase.DECODE
            stalled_here = (
                seq.stall_after is not None and not seq.stalled and seq.generated >= seq.stall_after
            )
            if seq.generated < seq.target and not stalled_here:
                n = 1
            seq.generated += n
        seq.step_tokens = n
        return n

    def _observe(self, iteration_tokens: int, prompt_tokens: int = 0) -> None:
        if self.metrics is not None:
            self.metrics.observe_step(
                len(self.running), self.num_waiting, self.kv_usage, iteration_tokens, prompt_tokens
            )
