"""The lab engine run in simulated time, with writers and no sockets: plans of arrivals, and
what the truth of each request says (gaps, causes, the schedule that must repeat)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from steadystream import FakeClock
from steadystream.lab import LabEngine, LabRequest, Scenario, StreamHandle
from steadystream.lab.presets import PRESETS
from steadystream.lab.scenario_file import scenario_from_mapping
from steadystream.lab.truth import RequestTruth

MS = 1_000_000


def scenario(base: str = "steady", **sections: Any) -> Scenario:
    """A preset with some sections changed, e.g. ``scenario("steady", scheduler={...})``."""
    return scenario_from_mapping({"preset": base, **sections})


async def drain(handle: StreamHandle) -> None:
    """Write a stream as the server does, in the handle's clock, with no socket."""
    clock = handle.clock
    while (batch := await handle.next_write()) is not None:
        texts = [handle.text_of(event) for event in batch]
        handle.mark_written(batch, clock.now_ns(), [0] * len(batch), texts)
    handle.finish(clock.now_ns())


@dataclass
class Arrival:
    at_ms: float
    request: LabRequest
    cancel_at_ms: float | None = None  # the client leaves at this time


@dataclass
class LabRun:
    engine: LabEngine
    clock: FakeClock
    truths: list[RequestTruth] = field(default_factory=list)

    def by_id(self, request_id: str) -> RequestTruth:
        truth = self.engine.truth(request_id)
        assert truth is not None
        return truth


def arrivals(times_ms: Sequence[float], **request: Any) -> list[Arrival]:
    """One request per time, ids ``r0``, ``r1``, ..."""
    return [Arrival(t, LabRequest(f"r{i}", **request)) for i, t in enumerate(times_ms)]


async def run_lab(
    chosen: Scenario | str,
    plan: Sequence[Arrival],
    *,
    seed: int = 0,
    until_ms: float = 120_000,
) -> LabRun:
    """Run the engine in simulated time until every planned request is done (or ``until``)."""
    if isinstance(chosen, str):
        chosen = PRESETS[chosen]
    clock = FakeClock()
    engine = LabEngine(chosen, seed=seed, clock=clock)
    run = LabRun(engine, clock)
    await engine.start()

    async def client(arrival: Arrival) -> None:
        await clock.sleep_until(round(arrival.at_ms * MS))
        handle = engine.submit(arrival.request)
        run.truths.append(handle.truth)
        writer = asyncio.ensure_future(drain(handle))
        if arrival.cancel_at_ms is None:
            await writer
            return
        await clock.sleep_until(round(arrival.cancel_at_ms * MS))
        if not writer.done():
            writer.cancel()
            handle.cancel()
            handle.finish(clock.now_ns(), "cancelled")

    clients = [asyncio.ensure_future(client(arrival)) for arrival in plan]
    limit = round(until_ms * MS)
    await clock.advance(0)  # let the clients start

    def finished() -> bool:
        return all(task.done() for task in clients) and all(t.done for t in run.truths)

    while not finished() and clock.now_ns() < limit:
        deadline = clock.next_deadline
        if deadline is None:
            break
        await clock.advance_to(min(deadline, limit))
    await engine.stop()
    for task in clients:
        if not task.done():
            task.cancel()
    await asyncio.gather(*clients, return_exceptions=True)
    return run


def gaps_ms(truth: RequestTruth) -> list[float]:
    """Gaps between content writes (the first from arrival), in ms, one per content event."""
    times = [t for t, k in zip(truth.written_ns, truth.kinds, strict=True) if k == 1]
    previous = [truth.arrival_ns, *times[:-1]]
    return [(b - a) / MS for a, b in zip(previous, times, strict=True)]


def content_causes(truth: RequestTruth) -> list[tuple[str, ...]]:
    return [
        tuple(c.value for c in causes)
        for causes, kind in zip(truth.causes, truth.kinds, strict=True)
        if kind == 1
    ]


def schedule(truth: RequestTruth) -> list[tuple[int, int, tuple[str, ...]]]:
    """What must repeat exactly: each content event's planned offset, tokens and causes."""
    return [
        (planned - truth.arrival_ns, tokens, tuple(c.value for c in causes))
        for planned, tokens, causes, kind in zip(
            truth.planned_ns, truth.tokens, truth.causes, truth.kinds, strict=True
        )
        if kind == 1
    ]


def wait_serving(base: str, server: subprocess.Popen[bytes], *, within_s: float = 20.0) -> None:
    """Until the lab process ``server`` answers ``{base}/healthz``; fails with its output if
    it ended first, or after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=1).close()
            return
        # (TimeoutError: a lab that took the connection but is slow to answer on a busy
        # machine is asked again, not a failure; urlopen raises it unwrapped from a read)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            assert server.poll() is None, server.communicate()[0]
            assert time.monotonic() < deadline, "the lab did not start"
            time.sleep(0.1)
