"""How fast pacers run: simulation throughput, and the live driver's overhead per event.

    python benchmarks/bench_pacing.py --streams 2000 --chunks 200
    python benchmarks/bench_pacing.py --pacers leaky adaptive --repeat 3 --live-events 200000

Simulation: every synthetic stream (benchmarks/_synthetic.py) through ``simulate`` with each
pacer's defaults, in events per second of CPU time (time.process_time, less disturbed by the
other work on a shared machine than wall time, shown beside it), best of --repeat, on one
core. Backpressure is on, as in ``whatif``.

Live: ``pace`` over an in-memory source, with a clock whose every deadline is already past
(each reading moves it on a second), so the figure is the driver's own cost: the reader task,
the wake-ups and the policy, without any sleeping. It is measured side by side with a plain
``async for`` over the same source in the same run; the difference, divided by the events, is
the overhead per event.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from _synthetic import synthetic_timelines
from steadystream import Event
from steadystream.shaping import PACERS, pace, parse_spec, simulate

T = TypeVar("T")


def best_of(repeat: int, run: Callable[[], T]) -> tuple[float, float, T]:
    """Best CPU and wall seconds of ``repeat`` runs, and the last run's result."""
    best_cpu = best_wall = float("inf")
    result: T
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall, result


class PastClock:
    """A clock for which every deadline has already passed: it moves a second per reading."""

    def __init__(self) -> None:
        self._now = 0

    def now_ns(self) -> int:
        self._now += 1_000_000_000
        return self._now

    async def sleep_until(self, deadline_ns: int) -> None:
        await asyncio.sleep(0)


async def in_memory(events: list[Event]) -> AsyncIterator[Event]:
    for event in events:
        yield event


async def plain(events: list[Event]) -> int:
    count = 0
    async for _ in in_memory(events):
        count += 1
    return count


async def paced(events: list[Event], spec: str) -> int:
    count = 0
    async for _ in pace(in_memory(events), parse_spec(spec), PastClock()):
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=200, help="events per stream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pacers", nargs="+", choices=list(PACERS), default=list(PACERS))
    parser.add_argument("--live-events", type=int, default=100_000)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the goal says

    timelines = synthetic_timelines(args.streams, args.chunks, seed=args.seed)
    events = sum(len(t) for t in timelines)
    print(f"simulation: {len(timelines):,} streams, {events:,} events, best of {args.repeat}")
    print(f"{'pacer':<12} {'CPU s':>7} {'wall s':>7} {'M events/s':>11}")
    for name in args.pacers:
        pacer = parse_spec(name)
        cpu, wall, out = best_of(args.repeat, lambda p=pacer: [simulate(t, p) for t in timelines])
        assert sum(t.total_tokens for t in out) == sum(t.total_tokens for t in timelines)
        print(f"{name:<12} {cpu:7.2f} {wall:7.2f} {events / cpu / 1e6:11.2f}")

    source = [Event(i, " w", 1) for i in range(args.live_events)]
    print(f"\nlive: {len(source):,} one-token events from memory, best of {args.repeat}")
    print(f"{'driver':<24} {'CPU s':>7} {'µs/event':>9} {'overhead µs/event':>18}")
    base_cpu, _, count = best_of(args.repeat, lambda: asyncio.run(plain(source)))
    assert count == len(source)
    print(f"{'async for (plain)':<24} {base_cpu:7.2f} {base_cpu / count * 1e6:9.2f} {'':>18}")
    for name in args.pacers:
        cpu, _, count = best_of(args.repeat, lambda n=name: asyncio.run(paced(source, n)))
        assert count == len(source)
        per_event = cpu / count * 1e6
        overhead = (cpu - base_cpu) / count * 1e6
        print(f"{'pace + ' + name:<24} {cpu:7.2f} {per_event:9.2f} {overhead:18.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
