"""How many concurrent streams the lab sustains on one core while its own lag stays small.

    python benchmarks/bench_lab.py                                # 100, 500, 1000 streams
    python benchmarks/bench_lab.py --streams 1000 --rate 20 --duration 20 --pin

The lab runs in this process, on one event loop (uvloop when installed) and so on one core at
a time, with the garbage-collector tuning that ``steadystream lab`` applies to its own
process (``quiet_gc``). A load process keeps ``--streams`` streams open through aiohttp
(a new request as soon as one ends, lengths varied around ``--tokens``) and only counts
what it reads. ``--pin`` puts the lab and the load on one core each. The scenario is
``steady`` with one step every ``1 / rate`` seconds whatever the batch size, so every
stream is offered ``rate`` events per second.

For each level: the lab's scheduling lag (actual step start minus planned) p50/p99/max,
the content events it wrote per second (from its ground truth), the client's events per
second over the same window, the lab's CPU time per wall second, and how many times it fell
so far behind that it re-anchored its plan. The goal: 1,000 streams at 20 events/s with lag
p99 <= 2 ms.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

import numpy as np
import orjson

from steadystream.lab import LabServer, scenario_from_mapping
from steadystream.lab.server import quiet_gc

LOAD = r"""
import asyncio, random, sys, time
import aiohttp, orjson

url, streams, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
warmup, duration = float(sys.argv[4]), float(sys.argv[5])
counts = {"events": 0, "requests": 0, "errors": 0}
rng = random.Random(0)

async def one(session):
    while True:
        # Lengths vary so that streams do not all end, and start again, in the same step.
        body = orjson.dumps({"model": "lab", "prompt": "go", "stream": True,
                             "max_tokens": rng.randint(tokens // 2, tokens * 3 // 2),
                             "ignore_eos": True})
        try:
            async with session.post(url, data=body,
                                    headers={"Content-Type": "application/json"}) as response:
                async for chunk in response.content.iter_any():
                    counts["events"] += chunk.count(b"data: ")
            counts["requests"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError):
            counts["errors"] += 1

async def main():
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     read_bufsize=1 << 20) as session:
        tasks = []
        for _ in range(streams):
            tasks.append(asyncio.ensure_future(one(session)))
            await asyncio.sleep(0)
        await asyncio.sleep(warmup)
        before, started = counts["events"], time.monotonic()
        await asyncio.sleep(duration)
        events, elapsed = counts["events"] - before, time.monotonic() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(orjson.dumps({"events": events, "seconds": elapsed, "errors": counts["errors"],
                        "requests": counts["requests"]}).decode())

try:
    import uvloop
    uvloop.install()
except ImportError:
    pass
asyncio.run(main())
"""


def bench_scenario(streams: int, rate: float) -> object:
    return scenario_from_mapping(
        {
            "preset": "steady",
            "name": "bench",
            "scheduler": {
                "step_base_ms": 1000.0 / rate,
                "step_per_seq_ms": 0.0,
                "prefill_per_token_ms": 0.0,
                "max_running": max(streams * 2, 256),
            },
            "kv_cache": {"total_blocks": 1_000_000},
            "server": {"keep_requests": 1_000_000},
        },
        source="bench",
    )


def run_level(
    streams: int, rate: float, duration: float, warmup: float, tokens: int, pin: bool = False
) -> dict:
    cores = sorted(os.sched_getaffinity(0)) if pin and hasattr(os, "sched_getaffinity") else []
    with LabServer(bench_scenario(streams, rate)) as lab:  # type: ignore[arg-type]
        quiet_gc()  # as `steadystream lab` does in its own process
        engine = lab.engine
        load_cmd = [sys.executable, "-c", LOAD, f"{lab.base_url}/completions",
                    str(streams), str(tokens), str(warmup), str(duration)]  # fmt: skip
        preexec = None
        if len(cores) > 1:
            other = cores[-1]

            def preexec() -> None:
                os.sched_setaffinity(0, {other})

        load = subprocess.Popen(load_cmd, stdout=subprocess.PIPE, preexec_fn=preexec)
        time.sleep(warmup)
        lab.call_in_loop(engine.reset_lag_samples)
        cpu0, wall0 = _cpu(), time.perf_counter()
        t0 = lab.call_in_loop(engine.clock.now_ns)
        time.sleep(duration)
        t1 = lab.call_in_loop(engine.clock.now_ns)
        cpu1, wall1 = _cpu(), time.perf_counter()
        lags = lab.call_in_loop(engine.lag_samples)
        written = lab.call_in_loop(lambda: _events_between(engine, t0, t1))
        running = engine.num_running
        resets = engine.lag_resets
        out, _ = load.communicate(timeout=warmup + duration + 60)
    client = orjson.loads(out.splitlines()[-1])
    seconds = (t1 - t0) / 1e9
    return {
        "streams": streams,
        "running": running,
        "offered": streams * rate,
        "lab_events_s": written / seconds,
        "client_events_s": client["events"] / client["seconds"],
        "lag_p50_ms": float(np.percentile(lags, 50)) / 1e6 if len(lags) else float("nan"),
        "lag_p99_ms": float(np.percentile(lags, 99)) / 1e6 if len(lags) else float("nan"),
        "lag_max_ms": float(lags.max()) / 1e6 if len(lags) else float("nan"),
        "lab_cpu": (cpu1 - cpu0) / (wall1 - wall0),
        "lag_resets": resets,
        "errors": client["errors"],
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _events_between(engine: object, t0: int, t1: int) -> int:
    count = 0
    for truth in engine.truths.records():  # type: ignore[attr-defined]
        times = np.asarray(truth.written_ns, dtype=np.int64)
        kinds = np.asarray(truth.kinds, dtype=np.uint8)
        count += int(((times >= t0) & (times < t1) & (kinds == 1)).sum())
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--rate", type=float, default=20.0, help="events/s offered per stream")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--tokens", type=int, default=200, help="mean tokens per request")
    parser.add_argument(
        "--pin", action="store_true", help="pin the lab and the load to one core each"
    )
    args = parser.parse_args(argv)
    if args.pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    header = (
        f"{'streams':>7} {'offered/s':>9} {'lab ev/s':>9} {'client ev/s':>11} "
        f"{'lag p50':>8} {'lag p99':>8} {'lag max':>8} {'lab cpu':>7} {'resets':>6}"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} cores, load average {load:.2f} before the run")
    print(header)
    for streams in args.streams:
        r = run_level(streams, args.rate, args.duration, args.warmup, args.tokens, args.pin)
        print(
            f"{r['streams']:>7} {r['offered']:>9.0f} {r['lab_events_s']:>9.0f} "
            f"{r['client_events_s']:>11.0f} {r['lag_p50_ms']:>6.2f}ms {r['lag_p99_ms']:>6.2f}ms "
            f"{r['lag_max_ms']:>6.2f}ms {r['lab_cpu']:>6.0%} {r['lag_resets']:>6}"
            + (f"  ({r['errors']} client errors)" if r["errors"] else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
