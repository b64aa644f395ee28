"""Benchmark: the commands as users run them (``analyze``, with and without attribution, and
``explain``) beside a bare orjson + numpy line loop over the same file; then the library's
load + analyze and metrics alone, in process.

    python benchmarks/bench_analyze.py [--streams 10000] [--chunks 200] [--repeat 3]
    python benchmarks/bench_analyze.py --streams 100000 --repeat 1 --skip-library

Goals (docs/performance.md): ``steadystream analyze`` (attribution included) within 2x the
bare loop's wall time on 10,000 x 200 events, and under 2 GB of peak RSS on 100,000 x 200;
>= 2 M events/s end to end from JSONL and >= 20 M events/s for the metrics, on one core.

Each command is its own process (start-up and imports included, as a user pays them), run
in turns with the bare loop so that both see the same load on a shared machine; the best of
--repeat turns is reported, with the ratio to the bare loop's best, and each command's peak
RSS (its own, from wait4). The bare loop reads each line with orjson, takes its times as a
numpy array, and computes its p99 and worst gap; then the fleet's p99 of each. The library
stages are CPU time of this process (time.process_time), pinned to one core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
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

BARE_LOOP = """
import sys
import numpy as np
import orjson

p99, worst = [], []
with open(sys.argv[1], "rb") as file:
    for line in file:
        times = np.array(orjson.loads(line)["times"], dtype=np.int64)
        gaps = np.diff(times)
        if len(gaps):
            p99.append(np.percentile(gaps, 99))
            worst.append(gaps.max())
print(np.percentile(p99, 99), np.percentile(worst, 99))
"""


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


def run_process(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (GB) of one command, its output thrown away."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.stderr:
        child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {stderr[-2000:]}")
    return wall, usage.ru_maxrss / 1e6  # ru_maxrss is in KiB on Linux


def commands(path: Path, repeat: int) -> None:
    cli = [sys.executable, "-m", "steadystream"]
    runs = {
        "bare orjson + numpy line loop": [sys.executable, "-c", BARE_LOOP, str(path)],
        "steadystream analyze": [*cli, "analyze", str(path)],
        "steadystream analyze --no-explain": [*cli, "analyze", "--no-explain", str(path)],
        "steadystream explain": [*cli, "explain", str(path)],
    }
    best = {name: (float("inf"), 0.0) for name in runs}
    for _ in range(repeat):  # in turns: each round sees the same load on a shared machine
        for name, argv in runs.items():
            wall, rss = run_process(argv)
            best[name] = (min(best[name][0], wall), max(best[name][1], rss))
    bare = best["bare orjson + numpy line loop"][0]
    print(f"{'command':36s} {'wall s':>8s} {'x bare':>7s} {'peak RSS GB':>12s}")
    for name, (wall, rss) in best.items():
        print(f"{name:36s} {wall:8.2f} {wall / bare:7.2f} {rss:12.2f}")


def library(path: Path, repeat: int, events: int) -> None:
    def end_to_end() -> object:
        run = read_jsonl(path).timelines
        return fleet_metrics(stream_table(run))

    _, e2e_cpu, e2e_wall = timed(end_to_end, repeat)
    run = read_jsonl(path).timelines
    table, metrics_cpu, metrics_wall = timed(lambda: stream_table(run), repeat)
    _, fleet_cpu, _ = timed(lambda: fleet_metrics(table), repeat)
    rows = [
        ("load + analyze from JSONL", e2e_cpu, e2e_wall, 2e6),
        ("metrics (stream table + fleet)", metrics_cpu + fleet_cpu, metrics_wall, 20e6),
    ]
    print(f"{'stage':34s} {'cpu s':>8s} {'wall s':>8s} {'M events/s':>11s} {'goal':>6s}")
    for name, cpu, wall, goal in rows:
        print(f"{name:34s} {cpu:8.2f} {wall:8.2f} {events / cpu / 1e6:11.1f} {goal / 1e6:6.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-library", action="store_true", help="the commands alone")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        events = write_synthetic_jsonl(path, args.streams, args.chunks)
        size_mb = path.stat().st_size / 1e6
        print(
            f"{args.streams:,} streams x {args.chunks} chunks = {events:,} events, "
            f"JSONL {size_mb:,.0f} MB, best of {args.repeat}, load {os.getloadavg()[0]:.1f}"
        )
        commands(path, args.repeat)
        if not args.skip_library:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
            library(path, args.repeat, events)


if __name__ == "__main__":
    main()
