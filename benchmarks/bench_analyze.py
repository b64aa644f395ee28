"""Benchmark: load + analyze from JSONL, and metrics alone from in-memory timelines.

    python benchmarks/bench_analyze.py [--streams 100000] [--chunks 200] [--repeat 3]

Goals (docs/performance.md): >= 2 M events/s end to end from JSONL, >= 20 M events/s for the
metrics, on one core. Times are CPU time of this process (time.process_time), which the other
work on a shared machine disturbs less than wall time; wall time is printed beside it. The
best of --repeat runs is reported: the first run of each also pays for page faults on fresh
memory, which later runs reuse.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _synthetic import write_synthetic_jsonl
from steadystream.files import read_jsonl
from steadystream.metrics import fleet_metrics, stream_table

T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int) -> tuple[T, float, float]:
    best_cpu = best_wall = float("inf")
    result: T | None = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    assert result is not None
    return result, best_cpu, best_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the goal says

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        write_synthetic_jsonl(path, args.streams, args.chunks)
        size_mb = path.stat().st_size / 1e6

        def end_to_end() -> object:
            run = read_jsonl(path).timelines
            return fleet_metrics(stream_table(run))

        _, e2e_cpu, e2e_wall = timed(end_to_end, args.repeat)
        run = read_jsonl(path).timelines

    events = sum(len(t) for t in run)
    table, metrics_cpu, metrics_wall = timed(lambda: stream_table(run), args.repeat)
    _, fleet_cpu, _ = timed(lambda: fleet_metrics(table), args.repeat)

    print(
        f"{args.streams:,} streams x {args.chunks} chunks = {events:,} events, "
        f"JSONL {size_mb:,.0f} MB, best of {args.repeat}"
    )
    rows = [
        ("load + analyze from JSONL", e2e_cpu, e2e_wall, 2e6),
        ("metrics (stream table + fleet)", metrics_cpu + fleet_cpu, metrics_wall, 20e6),
    ]
    print(f"{'stage':34s} {'cpu s':>8s} {'wall s':>8s} {'M events/s':>11s} {'goal':>6s}")
    for name, cpu, wall, goal in rows:
        print(f"{name:34s} {cpu:8.2f} {wall:8.2f} {events / cpu / 1e6:11.1f} {goal / 1e6:6.0f}")


if __name__ == "__main__":
    main()
