"""analyze on many files: in one process against a Ray task per file, same result, how fast?

    python benchmarks/bench_analyze_ray.py [--files 4] [--streams 20000] [--chunks 100]

Writes ``--files`` synthetic JSONL runs (benchmarks/_synthetic.py, a seed each), then times
:func:`steadystream.analysis.analyze_files` over them in this process and on a local Ray with
as many CPUs as the machine has (Ray's own start is timed apart: a cluster pays it once), and
checks that the two fleet metrics are equal, value for value.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _synthetic import write_synthetic_jsonl
from steadystream.analysis import analyze_files
from steadystream.metrics import MetricConfig, fleet_metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--streams", type=int, default=20_000, help="streams per file")
    parser.add_argument("--chunks", type=int, default=100, help="events per stream")
    args = parser.parse_args()
    config = MetricConfig()
    with tempfile.TemporaryDirectory() as tmp:
        events = sum(
            write_synthetic_jsonl(Path(tmp) / f"run-{i}.jsonl", args.streams, args.chunks, seed=i)
            for i in range(args.files)
        )
        started = time.perf_counter()
        here = analyze_files([tmp], config)
        here_s = time.perf_counter() - started

        import ray

        started = time.perf_counter()
        ray.init(
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
        start_s = time.perf_counter() - started
        started = time.perf_counter()
        on_ray = analyze_files([tmp], config, ray=True)
        ray_s = time.perf_counter() - started
        ray.shutdown()
    same = fleet_metrics(here.table, config) == fleet_metrics(on_ray.table, config)
    print(
        f"{args.files} files, {args.files * args.streams:,} streams, {events:,} events; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(f"one process: {here_s:.2f} s ({events / here_s / 1e6:.2f} M events/s)")
    print(f"Ray, a task per file: {ray_s:.2f} s ({events / ray_s / 1e6:.2f} M events/s)")
    print(f"Ray's start (once per cluster): {start_s:.2f} s; fleet metrics equal: {same}")


if __name__ == "__main__":
    main()
