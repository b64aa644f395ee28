"""How fast timeline files are written and read, in events per second, on one core.

    python benchmarks/bench_files.py --streams 20000 --chunks 200
    python benchmarks/bench_files.py --formats jsonl jsonl.gz parquet --repeat 3

Writes synthetic timelines (benchmarks/_synthetic.py) to a temporary folder in each format,
reads them back, checks that every event came back, and prints one row per format. Rates are
computed from CPU time of this process (time.process_time), which the other work on a shared
machine disturbs less than wall time; wall time is shown beside it. Best of --repeat runs.
Generating the timelines is not counted.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TypeVar

from _synthetic import synthetic_timelines
from steadystream.files import read_timelines, write_timelines

FORMATS = ("jsonl", "jsonl.gz", "parquet")
T = TypeVar("T")


def best_of(repeat: int, run: Callable[[], T]) -> tuple[float, float, T]:
    """Best CPU and wall seconds of ``repeat`` runs, and the last run's result."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--streams", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=200, help="events per stream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=["jsonl"])
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the goal says

    started = time.perf_counter()
    timelines = synthetic_timelines(args.streams, args.chunks, seed=args.seed)
    events = sum(len(t) for t in timelines)
    print(
        f"{len(timelines):,} streams, {events:,} events, generated in "
        f"{time.perf_counter() - started:.1f} s"
    )
    header = ("format", "MB", "write CPU s", "wall s", "M events/s", "read CPU s", "wall s",
              "M events/s")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        paths = {fmt: os.path.join(folder, f"timelines.{fmt}") for fmt in args.formats}
        writes = {
            fmt: best_of(args.repeat, functools.partial(write_timelines, path, timelines))
            for fmt, path in paths.items()
        }
        # Read as analyze does, in a process that holds no other timelines: with the generated
        # ones alive, every garbage collection during the read would walk them all too.
        del timelines
        gc.collect()
        rows = []
        for fmt, path in paths.items():
            read_cpu, read_wall, result = best_of(
                args.repeat, functools.partial(read_timelines, path)
            )
            loaded = sum(len(t) for t in result.timelines)
            if loaded != events or result.truncated_line is not None:
                print(f"{fmt}: read back {loaded:,} events of {events:,}", file=sys.stderr)
                return 1
            del result
            write_cpu, write_wall, _ = writes[fmt]
            rows.append((
                fmt, f"{os.path.getsize(path) / 1e6:,.0f}",
                f"{write_cpu:.2f}", f"{write_wall:.2f}", f"{events / write_cpu / 1e6:.1f}",
                f"{read_cpu:.2f}", f"{read_wall:.2f}", f"{events / read_cpu / 1e6:.1f}",
            ))  # fmt: skip
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
