"""bench on Ray against bench in one process: the same fleet metrics, the same fidelity?

    python benchmarks/bench_ray.py [--scenario mixed] [--rate 8] [--requests 160] [--repeat 3]

Each round runs the same open-loop load (same seed: the same requests at the same offsets)
twice, each against a fresh lab process with the same seed that records its ground truth:
once from one process (``Bench``), once from two Ray actors on a local Ray of 2 CPUs
(``RayBench``, the one schedule shared). Both send their first request ``--lead`` seconds
after the lab started: the lab's background load and step plan run on its own clock from
its start, so a run that starts later meets them in another phase (Ray's actors take
seconds to start, one process does not); that, not the split, moved `mixed`'s tail before.

Printed per run (``--verbose``) and as ranges: the fleet's headline metrics; the client's
fidelity: each client gap against the lab's gap between the same two writes (|error| p50
and p99), the client's loop-lag p99 and the share of streams it flagged; the lead kept; and
how many requests reached the lab out of their order. The one-process runs' range is the
lab's own run-to-run spread, against which the Ray runs are judged (docs/performance.md
records a run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
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
from steadystream.bench.distributed import _START_LEAD_NS, RayBench
from steadystream.bench.session import BenchSettings
from steadystream.files import read_jsonl
from steadystream.metrics import fleet_metrics
from steadystream.timeline import Timeline

MS = 1_000_000
RAY_START_LEAD_S = _START_LEAD_NS / 1e9
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


async def one_run(
    base_url: str, args: argparse.Namespace, workers: int, start_at: float
) -> RunResult:
    """One run whose first request is due ``start_at`` (unix seconds), after the warm-up."""
    endpoint = Endpoint(base_url, "lab", usage="on")
    workload = Workload(builtin_prompts(), max_tokens=args.max_tokens, seed=args.seed)
    schedule = OpenLoop(args.rate, seed=args.seed)
    options = RunOptions(max_requests=args.requests)
    if workers == 1:
        async with Bench(endpoint, workload) as bench:
            # As many warm-up requests as the Ray run sends (one per worker): each one draws
            # from the lab's seeded randomness, so both runs meet the lab in the same state.
            await bench.warm_up(args.workers)
            await asyncio.sleep(max(0.0, start_at - time.time()))
            return await bench.run(schedule, options)
    async with RayBench(BenchSettings(endpoint, workload), workers=workers) as ray_bench:
        await ray_bench.warm_up(1)
        # The workers start their schedule this long after they are told to.
        await asyncio.sleep(max(0.0, start_at - RAY_START_LEAD_S - time.time()))
        return await ray_bench.run(schedule, options)


def measure(args: argparse.Namespace, workers: int, workdir: Path) -> dict[str, float | None]:
    record = workdir / f"truth-{workers}-{time.monotonic_ns()}.jsonl"
    with lab_process(args.scenario, args.seed, record) as url:
        lab_ready = time.time()
        # The lab's background load and its step plan run on its own clock from its start:
        # both sides start their schedule the same time after it, or they meet the lab in
        # another phase (Ray's actors take a second or two to start, one process does not).
        start_at = lab_ready + args.lead
        result = asyncio.run(one_run(url, args, workers, start_at))
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
    # From the lab's start to the first request: the lab's background load and step plan
    # are anchored to its start, so this offset decides which requests meet them.
    firsts = [t.started_at for t in result.timelines if t.started_at is not None]
    row["lead_s"] = min(firsts) - lab_ready if firsts else None
    row["lab_order_swaps"] = order_swaps(list(truth.values()))
    if row["lead_s"] is not None and row["lead_s"] > args.lead + 0.5:
        print(f"warning: the first request came {row['lead_s']:.2f} s after the lab's start,")
        print(f"not {args.lead:g} s: raise --lead, or this run met the lab in another phase")
    lab_fleet = fleet_metrics(list(truth.values())).scalars()
    row["lab_ttft_p50_s"] = lab_fleet["ttft_p50_s"]
    row["lab_p99_of_worst_gap_s"] = lab_fleet["p99_of_worst_gap_s"]
    return row


def order_swaps(truth: list[Timeline]) -> int:
    """Requests that reached the lab before the one sent just before them: the lab draws a
    request's randomness by its order of arrival, so each swap trades two requests' draws."""
    arrived = sorted(
        (t.started_at, int(t.stream_id.rsplit("-", 1)[1]))
        for t in truth
        if t.started_at is not None and "warmup" not in t.stream_id
    )
    order = [index for _, index in arrived]
    return sum(1 for a, b in itertools.pairwise(order) if b < a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="mixed")
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second")
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--lead", type=float, default=8.0, help="seconds from the lab's start to the load's"
    )
    parser.add_argument("--verbose", action="store_true", help="print each run's row")
    args = parser.parse_args()

    import ray

    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    rows: dict[str, list[dict[str, float | None]]] = {"one process": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for key, workers in (("one process", 1), ("ray", args.workers)):
                rows[key].append(measure(args, workers, Path(tmp)))
                if args.verbose:
                    print(key, rows[key][-1], flush=True)
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
        "lead_s",
        "lab_order_swaps",
    ]
    ray_column = f"ray, {args.workers} workers"
    # within: every Ray run inside the one-process range; overlap: the two ranges meet.
    print(f"{'metric':<22} {'one process (min..max)':>26} {ray_column:>26}  within  overlap")
    for name in names:
        single = [v for r in rows["one process"] if (v := r[name]) is not None]
        multi = [v for r in rows["ray"] if (v := r[name]) is not None]
        if not single or not multi:
            continue
        lo, hi = min(single), max(single)
        scale = 1000.0 if name.endswith("_s") else 1.0
        unit = " ms" if name.endswith("_s") else ""
        within = all(lo <= v <= hi for v in multi)
        overlap = min(multi) <= hi and max(multi) >= lo
        print(
            f"{name:<22} {lo * scale:>11.2f}..{hi * scale:<11.2f}{unit:>3} "
            f"{min(multi) * scale:>11.2f}..{max(multi) * scale:<11.2f}{unit:>3}  "
            f"{'yes' if within else 'no':<6}  {'yes' if overlap else 'no'}"
        )


if __name__ == "__main__":
    main()
