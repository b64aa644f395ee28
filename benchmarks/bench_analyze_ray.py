"""analyze (or explain) on many files: one process against Ray tasks, same result, how fast?

    python benchmarks/bench_analyze_ray.py [--files 4] [--streams 20000] [--chunks 100]
    python benchmarks/bench_analyze_ray.py --explain --files 4 --streams 5000

Writes ``--files`` synthetic JSONL runs (benchmarks/_synthetic.py, a seed each, stream ids of
their own, on one wall clock so that streams of different files are in flight together), then
times :func:`steadystream.analysis.analyze_files` over them in this process and on a local Ray
with as many CPUs as the machine has (Ray's own start is timed apart: a cluster pays it once),
and checks that the two fleet metrics are equal, value for value. With ``--explain`` it times
``explain`` instead: reading the files and attributing every stall in this process, against
:func:`steadystream.explanations.explain_files` (two rounds of Ray tasks), and checks that
the two explanations are equal.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _synthetic import write_synthetic_jsonl
from steadystream.analysis import analyze_files, timeline_files
from steadystream.attribution import explain
from steadystream.bench.verdict import load_runs
from steadystream.explanations import explain_files
from steadystream.metrics import MetricConfig, fleet_metrics

THRESHOLD_NS = 400_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--streams", type=int, default=20_000, help="streams per file")
    parser.add_argument("--chunks", type=int, default=100, help="events per stream")
    parser.add_argument("--explain", action="store_true", help="time explain, not analyze")
    args = parser.parse_args()
    config = MetricConfig()
    with tempfile.TemporaryDirectory() as tmp:
        events = sum(
            write_synthetic_jsonl(
                Path(tmp) / f"run-{i}.jsonl", args.streams, args.chunks, seed=i, prefix=f"f{i}"
            )
            for i in range(args.files)
        )
        print(
            f"{args.files} files, {args.files * args.streams:,} streams, {events:,} events; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
        )
        if args.explain:
            explain_both(Path(tmp), events)
            return
        started = time.perf_counter()
        here = analyze_files([tmp], config)
        here_s = time.perf_counter() - started

        ray, start_s = start_ray()
        started = time.perf_counter()
        on_ray = analyze_files([tmp], config, ray=True)
        ray_s = time.perf_counter() - started
        ray.shutdown()
    same = fleet_metrics(here.table, config) == fleet_metrics(on_ray.table, config)
    print(f"one process: {here_s:.2f} s ({events / here_s / 1e6:.2f} M events/s)")
    print(f"Ray, a task per file: {ray_s:.2f} s ({events / ray_s / 1e6:.2f} M events/s)")
    print(f"Ray's start (once per cluster): {start_s:.2f} s; fleet metrics equal: {same}")


def start_ray() -> tuple[Any, float]:
    """A local Ray on this machine's CPUs, on loopback, and how long it took to start."""
    import ray

    started = time.perf_counter()
    ray.init(
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    return ray, time.perf_counter() - started


def explain_both(folder: Path, events: int) -> None:
    paths = timeline_files([folder])
    started = time.perf_counter()
    timelines, _ = load_runs(paths)
    read_s = time.perf_counter() - started
    here = explain(timelines, stall_threshold_ns=THRESHOLD_NS)
    here_s = time.perf_counter() - started
    del timelines

    ray, start_s = start_ray()
    times = []
    for _ in range(2):  # the first call also starts Ray's worker processes
        started = time.perf_counter()
        on_ray = explain_files(paths, stall_threshold_ns=THRESHOLD_NS).explanation
        times.append(time.perf_counter() - started)
    ray.shutdown()
    same = on_ray is not None and on_ray.to_json() == here.to_json()
    print(
        f"one process: {here_s:.2f} s (reading {read_s:.2f} s), {len(here.stalls):,} stalls,"
        f" {events / here_s / 1e6:.2f} M events/s"
    )
    cold, warm = times
    print(
        f"Ray, two rounds of tasks: {warm:.2f} s ({events / warm / 1e6:.2f} M events/s);"
        f" {cold:.2f} s the first time (Ray's workers starting)"
    )
    print(f"Ray's start (once per cluster): {start_s:.2f} s; explanations equal: {same}")


if __name__ == "__main__":
    main()
