"""What resume costs the relay, and how fast a reader comes back, side by side in one sitting.

    python benchmarks/bench_resume.py --streams 500 --rounds 2

One lab (its own process) serves every phase. Three gateways run at once, each in its own
process, the same but for ``resume``: ``off`` (``enabled: false``), ``memory`` (the
default) and ``redis`` (a ``redis-server`` this script starts on loopback and stops by pid;
Debian's). Each phase streams N concurrent requests through one of them (chat, the lab's
tokens, ``bench_gateway``'s client and measures: events per second of the proxy's own CPU,
the gateway's own added latency from its histogram, delivery latency against the lab's
truth); the phases alternate for ``--rounds`` rounds, each round starting one mode later
(``off``, ``memory``, ``redis``; then ``memory``, ``redis``, ``off``; ...), so the
machine's drift and each phase's place in its round fall on all three alike (take a
multiple of three rounds). The ratios are each phase's events per proxy
CPU-second over the ``off`` phase of the same round.

Then the time to come back: for ``--resumes`` streams that ended through the ``redis``
gateway, a ``GET /v1/streams/{id}`` with ``Last-Event-ID: 50`` through a second ``redis``
gateway process (another replica, sharing the Redis), from the request sent to its first
event read: p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gateway import (
    _CLI,
    PhaseResult,
    Process,
    measure,
    start,
    start_lab,
)
from steadystream._processes import free_port

_MODES = ("off", "memory", "redis")


def start_redis(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    popen = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work), "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.3)
    return popen, f"redis://127.0.0.1:{port}/0"


def start_gateway(env: dict[str, str], lab: Process, work: Path, name: str, resume: str) -> Process:
    port = free_port()
    config = work / f"{name}.yaml"
    config.write_text(
        f"server: {{port: {port}}}\n"
        f"upstreams: [{{name: lab, base_url: '{lab.base_url}'}}]\n"
        f"resume: {resume}\n",
        encoding="utf-8",
    )
    argv = [sys.executable, "-c", _CLI, "gateway", "--config", str(config)]
    url = f"http://127.0.0.1:{port}"
    return start(name, argv, f"{url}/v1", f"{url}/healthz", env)


async def stream_ids(url: str, count: int, tokens: int) -> list[str]:
    """Run ``count`` streams to their end; their stream ids."""
    body = {
        "model": "lab",
        "messages": [{"role": "user", "content": "Keep me."}],
        "stream": True,
        "max_tokens": tokens,
    }
    async with aiohttp.ClientSession() as session:

        async def one() -> str:
            async with session.post(f"{url}/chat/completions", json=body) as response:
                await response.read()
                return response.headers["X-Steadystream-Stream-Id"]

        return list(await asyncio.gather(*(one() for _ in range(count))))


async def come_back(url: str, ids: list[str], after: int) -> list[float]:
    """Milliseconds from each resume request sent to its first event read, one at a time."""
    origin = url.removesuffix("/v1")
    took: list[float] = []
    async with aiohttp.ClientSession() as session:
        for stream_id in ids:
            sent = time.perf_counter()
            async with session.get(
                f"{origin}/v1/streams/{stream_id}", headers={"Last-Event-ID": str(after)}
            ) as response:
                assert response.status == 200, response.status
                first = await response.content.readuntil(b"\n\n")
                took.append((time.perf_counter() - sent) * 1e3)
                assert f"id: {after + 1}".encode() in first, first
                await response.read()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--step-ms", type=float, default=50.0, help="the lab's decode step")
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds over which streams start")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--resumes", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    env = {**os.environ, "BENCH_DIR": str(work)}
    processes: dict[str, Process] = {}
    redis, redis_url = start_redis(work)
    results: list[tuple[int, str, PhaseResult]] = []
    resume_ms: list[float] = []
    try:
        lab = processes["lab"] = start_lab(work, env, args.step_ms, args.tokens)
        stores = {
            "off": "{enabled: false}",
            "memory": "{store: memory}",
            "redis": f"{{store: '{redis_url}'}}",
        }
        for mode in _MODES:
            processes[mode] = start_gateway(env, lab, work, mode, stores[mode])
        processes["replica"] = start_gateway(env, lab, work, "replica", stores["redis"])
        for mode in _MODES:  # warm-up: pools, imports, caches
            proxy = processes[mode]
            measure("gateway", proxy.base_url, proxy, lab, work, 20, 5, 0.2)
        for round_ in range(args.rounds):
            for mode in rotated(_MODES, round_):
                proxy = processes[mode]
                result = measure(
                    "gateway", proxy.base_url, proxy, lab, work, args.streams, args.tokens,
                    args.ramp,
                )  # fmt: skip
                results.append((round_, mode, result))
                print(json.dumps({"round": round_, "mode": mode, **result.__dict__}), flush=True)
        ids = asyncio.run(stream_ids(processes["redis"].base_url, args.resumes, args.tokens))
        resume_ms = asyncio.run(come_back(processes["replica"].base_url, ids, 50))
    finally:
        for process in reversed(list(processes.values())):
            process.stop()
        redis.terminate()
        redis.wait(timeout=10)
    report(results, resume_ms)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "results": [{"round": r, "mode": m, **p.__dict__} for r, m, p in results],
                    "resume_ms": resume_ms,
                },
                indent=1,
            )
        )


def rotated(modes: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """The phases of round ``round_``: each round starts one mode later (off, memory, redis;
    then memory, redis, off; ...), so that over a multiple of three rounds each mode runs in
    each place once, and what a place brings (the machine warmer or colder after a pause,
    the previous phase's gateway still settling) falls on every mode alike."""
    shift = round_ % len(modes)
    return modes[shift:] + modes[:shift]


def report(results: list[tuple[int, str, PhaseResult]], resume_ms: list[float]) -> None:
    off = {r: p for r, m, p in results if m == "off"}
    print()
    print("| round | resume | events | errors | events per proxy CPU-s | over off | "
          "own p99 ms | delivery p99 ms | over off p99 ms |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for round_, mode, p in results:
        rate = p.events / p.proxy_cpu_s if p.proxy_cpu_s else float("nan")
        base = off[round_]
        base_rate = base.events / base.proxy_cpu_s if base.proxy_cpu_s else float("nan")
        print(
            f"| {round_} | {mode} | {p.events} | {p.errors} | {rate:,.0f} | "
            f"{rate / base_rate:.3f} | {p.own_p99_ms or float('nan'):.2f} | {p.p99_ms:.1f} | "
            f"{p.p99_ms - base.p99_ms:+.1f} |"
        )
    ratios: dict[str, list[float]] = {}
    added: dict[str, list[float]] = {}
    for round_, mode, p in results:
        base = off[round_]
        if p.proxy_cpu_s and base.proxy_cpu_s:
            rate, base_rate = p.events / p.proxy_cpu_s, base.events / base.proxy_cpu_s
            ratios.setdefault(mode, []).append(rate / base_rate)
        added.setdefault(mode, []).append(p.p99_ms - base.p99_ms)
    print()
    for mode in _MODES[1:]:
        if ratios.get(mode):
            print(
                f"{mode}: events per proxy CPU-s over off, mean {np.mean(ratios[mode]):.3f}"
                f" (median {np.median(ratios[mode]):.3f}, min {min(ratios[mode]):.3f},"
                f" max {max(ratios[mode]):.3f}); added delivery p99 mean"
                f" {np.mean(added[mode]):+.1f} ms (median {np.median(added[mode]):+.1f},"
                f" min {min(added[mode]):+.1f}, max {max(added[mode]):+.1f})"
            )
    if resume_ms:
        values = np.asarray(resume_ms)
        print()
        print(
            f"resume through another process (redis on loopback), {len(values)} resumes: "
            f"first event p50 {np.percentile(values, 50):.2f} ms, "
            f"p99 {np.percentile(values, 99):.2f} ms"
        )


if __name__ == "__main__":
    main()
