"""bench on Ray against bench in one process: the same fleet metrics, the same fidelity?

    python benchmarks/bench_ray.py [--scenario mixed] [--rate 8] [--requests 160] [--repeat 3]

Each round runs the same open-loop load (same seed: the same requests at the same offsets)
twice, each against a fresh lab process with the same seed that records its ground truth:
once from one process (``Bench``), once from two Ray actors on a local Ray of 2 CPUs
(``RayBench``, the one schedule shared). Printed per run: the fleet's headline metrics, and
the client's fidelity: each client gap against the lab's gap between the same two writes
(|error| p50 and p99), the client's loop-lag p99 and the share of streams it flagged. The
one-process runs' range is the lab's own run-to-run spread, against which the Ray runs are
judged (docs/performance.md records a run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from steadystream._processes import Child, free_port, steadystream_command
from steadystream.bench import (
    Bench,
    Endpoint,
    OpenLoop,
    RunOptions,
    RunResult,
    Workload,
    builtin_prompts,
    compare_stream,
)
from steadystream.bench.distributed import RayBench
from steadystream.bench.session import BenchSettings
from steadystream.files import read_jsonl
from steadystream.metrics import fleet_metrics

MS = 1_000_000
HEADLINE = (
    "p99_of_p99_s",
    "p99_of_worst_gap_s",
    "p50_of_worst_gap_s",
    "goodput",
    "ttft_p50_s",
    "ttft_p95_s",
    "pooled_gap_p99_s",
)


@contextlib.contextmanager
def lab_process(scenario: str, seed: int, record: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = steadystream_command(
        "lab", "--scenario", scenario, "--seed", str(seed), "--port", str(port),
        "--record", str(record),
    )  # fmt: skip
    with Child("the lab", command, health_url=f"{url}/healthz", start_timeout_s=60):
        yield f"{url}/v1"


async def one_run(base_url: str, args: argparse.Namespace, workers: int) -> RunResult:
    endpoint = Endpoint(base_url, "lab", usage="on")
    workload = Workload(builtin_prompts(), max_tokens=args.max_tokens, seed=args.seed)
    schedule = OpenLoop(args.rate, seed=args.seed)
    options = RunOptions(max_requests=args.requests)
    if workers == 1:
        async with Bench(endpoint, workload) as bench:
            # As many warm-up requests as the Ray run sends (one per worker): each one draws
            # from the lab's seeded randomness, so both runs meet the lab in the same state.
            await bench.warm_up(args.workers)
            return await bench.run(schedule, options)
    async with RayBench(BenchSettings(endpoint, workload), workers=workers) as ray_bench:
        await ray_bench.warm_up(1)
        return await ray_bench.run(schedule, options)


def measure(args: argparse.Namespace, workers: int, workdir: Path) -> dict[str, float | None]:
    record = workdir / f"truth-{workers}-{time.monotonic_ns()}.jsonl"
    with lab_process(args.scenario, args.seed, record) as url:
        result = asyncio.run(one_run(url, args, workers))
        time.sleep(0.5)  # the lab records each request once its writer has finished
    truth = {t.stream_id: t for t in read_jsonl(record).timelines}
    errors = [
        compare_stream(t, truth[t.stream_id]).gap_errors_ns
        for t in result.timelines
        if t.stream_id in truth
    ]
    error = np.concatenate(errors) / MS
    fleet = fleet_metrics(result.timelines).scalars()
    row: dict[str, float | None] = {name: fleet[name] for name in HEADLINE}
    row["gap_error_p50_ms"] = float(np.percentile(error, 50))
    row["gap_error_p99_ms"] = float(np.percentile(error, 99))
    row["loop_lag_p99_ms"] = result.loop_lag.p99_ms
    row["flagged_share"] = sum(bool(t.meta.get("client_lagged")) for t in result.timelines) / max(
        1, len(result.timelines)
    )
    row["streams"] = len(result.timelines)
    lab_fleet = fleet_metrics(list(truth.values())).scalars()
    row["lab_ttft_p50_s"] = lab_fleet["ttft_p50_s"]
    row["lab_p99_of_worst_gap_s"] = lab_fleet["p99_of_worst_gap_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="mixed")
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second")
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    import ray

    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
    )
    rows: dict[str, list[dict[str, float | None]]] = {"one process": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            rows["one process"].append(measure(args, 1, Path(tmp)))
            rows["ray"].append(measure(args, args.workers, Path(tmp)))
    ray.shutdown()
    print(
        f"lab {args.scenario}, open loop {args.rate:g} req/s, {args.requests} requests, seed "
        f"{args.seed}; {args.repeat} runs each; load average {os.getloadavg()[0]:.2f}"
    )
    names = [
        *HEADLINE,
        "lab_ttft_p50_s",
        "lab_p99_of_worst_gap_s",
        "gap_error_p50_ms",
        "gap_error_p99_ms",
        "loop_lag_p99_ms",
        "flagged_share",
    ]
    ray_column = f"ray, {args.workers} workers"
    print(f"{'metric':<22} {'one process (min..max)':>26} {ray_column:>26}  within")
    for name in names:
        single = [r[name] for r in rows["one process"] if r[name] is not None]
        multi = [r[name] for r in rows["ray"] if r[name] is not None]
        if not single or not multi:
            continue
        lo, hi = min(single), max(single)
        scale = 1000.0 if name.endswith("_s") else 1.0
        unit = " ms" if name.endswith("_s") else ""
        within = all(lo <= v <= hi for v in multi)
        print(
            f"{name:<22} {lo * scale:>11.2f}..{hi * scale:<11.2f}{unit:>3} "
            f"{min(multi) * scale:>11.2f}..{max(multi) * scale:<11.2f}{unit:>3}  "
            f"{'yes' if within else 'no'}"
        )


if __name__ == "__main__":
    main()
