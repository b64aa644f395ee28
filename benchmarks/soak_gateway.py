"""Soak the gateway: many streams, every misbehaviour at once, then prove nothing leaked.

    python benchmarks/soak_gateway.py                          # 1,000 streams over 10 minutes
    python benchmarks/soak_gateway.py --streams 60 --minutes 0.34 --long-tokens 1000 \
        --stuck-hold 45s --out soak-run                        # the short run the tests make

Two labs (each its own process) serve as upstreams, `lab-a` first and `lab-b` its fallback;
the gateway (its own process, logging at INFO) sits in front with one tenant; this process is
the load: streams start spread over 85% of the run, each with one behaviour of the mix
(benchmarks/_soak_plan.py): healthy, slow and stuck readers, disconnects at random points,
and upstream stalls, resets, in-band errors, oversized events, a finish then silence, and an
upstream that echoes its key. The upstream faults are asked of lab-a by ``X-Lab-Fault``.

The upstreams and the tenant get random secret keys. At the end the run checks, and prints:

- every stream has exactly one gateway record per edge, with the outcome its kind must have;
- no upstream stream is left open (the labs' ground truth), and the key probes fired;
- the gateway's RSS levels off (Theil-Sen slope over the last half of the run);
- cancel at the engine: client gone -> lab freed the sequence, p99 <= 100 ms;
- no silent truncation: each reader got [DONE] after a finish or an in-band error, in time;
- no key in the gateway's log, recordings or metrics, nor in what any client received.

It exits 1 when a check fails. The run's files (the gateway's log and recordings, the labs'
logs, /metrics, and summary.json with every check's figures and every client's view) stay in
``--out``. Loopback only; every process it starts is stopped by its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from _soak_checks import (
    Check,
    Limits,
    cancel_latencies_ms,
    check_cancel,
    check_keys,
    check_open_upstreams,
    check_records,
    check_rss,
    check_truncation,
)
from _soak_client import ClientResult, Target, run_stream
from _soak_plan import KINDS, SoakShape, StreamPlan, plan_streams
from steadystream._exceptions import SpecError
from steadystream._processes import Child, free_port, steadystream_command
from steadystream._serving import new_event_loop
from steadystream._units import parse_duration, parse_size
from steadystream.files import read_jsonl

# The gateway as its operators run it, with its log at INFO (failovers are logged there).
_GATEWAY_CODE = (
    "import logging; logging.basicConfig(level=logging.INFO, "
    "format='%(asctime)s %(levelname)s %(name)s: %(message)s'); "
    "from steadystream.cli import main; main()"
)
_LAB_SCENARIO = """\
name: soak
description: a quick engine for the gateway soak; every fault comes by X-Lab-Fault
scheduler: {step_base_ms: 20.0, step_per_seq_ms: 0.0, max_running: 4096}
output: {min_tokens: 40, max_tokens: 120}
server: {keep_requests: 100000}
"""


def _gateway_yaml(work: Path, port: int, labs: Sequence[str], stuck_timeout: str) -> str:
    return f"""\
server: {{host: 127.0.0.1, port: {port}}}
upstreams:
  - name: lab-a
    base_url: {labs[0]}
    api_key_env: SOAK_LAB_A_KEY
    priority: 0
    forward_headers: [X-Lab-Fault]
  - name: lab-b
    base_url: {labs[1]}
    api_key_env: SOAK_LAB_B_KEY
    priority: 1
tenants:
  - name: soak
    api_key_env: [SOAK_TENANT_KEY]
watchdog: {{first_token_timeout: 10s, stall_timeout: 1.5s}}
failover: {{policy: continue}}
recording: {{enabled: true, directory: {work / "recordings"}}}
limits: {{stuck_timeout: {stuck_timeout}, buffer_bytes: 32KiB, client_send_buffer: 16KiB}}
resume: {{grace: 0s}}  # a disconnect cancels at once: the soak times cancellation
"""


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the load -------------------------------------------------------------------------------------


async def _load(
    plans: Sequence[StreamPlan],
    target: Target,
    gateway_pid: int,
    rss: list[tuple[float, int]],
    say: Callable[[str], None],
) -> dict[str, ClientResult]:
    start = time.monotonic()
    results: dict[str, ClientResult] = {}

    async def one(plan: StreamPlan) -> None:
        await asyncio.sleep(max(0.0, start + plan.start_s - time.monotonic()))
        results[plan.request_id] = await run_stream(plan, target)

    async def sample() -> None:
        last_said = start
        while True:
            now = time.monotonic()
            rss.append((now - start, _rss_bytes(gateway_pid)))
            if now - last_said >= 30:
                last_said = now
                say(
                    f"  {now - start:5.0f}s: {len(results)}/{len(plans)} streams done, "
                    f"gateway RSS {rss[-1][1] / 2**20:.0f} MiB, load {_loadavg()}"
                )
            await asyncio.sleep(1.0)

    sampler = asyncio.ensure_future(sample())
    try:
        await asyncio.gather(*(one(plan) for plan in plans))
    finally:
        sampler.cancel()
    return results


async def _lab_truths(labs: Sequence[str], settle_s: float) -> dict[str, dict[str, Any]]:
    """Every upstream request's ground truth, once all are done (or ``settle_s`` is up)."""
    timeout = aiohttp.ClientTimeout(total=30)
    deadline = time.monotonic() + settle_s
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def get(url: str) -> Any:
            async with session.get(url) as response:
                response.raise_for_status()
                return await response.json()

        limit = asyncio.Semaphore(8)

        async def truth(lab: str, rid: str) -> dict[str, Any]:
            async with limit:
                full = await get(f"{lab}/lab/requests/{rid}")
            full.pop("events", None)  # large; the checks need the instants only
            return dict(full)

        while True:
            truths: dict[str, dict[str, Any]] = {}
            for lab in labs:
                ids = (await get(f"{lab}/lab/requests"))["request_ids"]
                got = await asyncio.gather(*(truth(lab, rid) for rid in ids))
                truths.update({t["request_id"]: t for t in got})
            if all(t["done"] for t in truths.values()) or time.monotonic() > deadline:
                return truths
            await asyncio.sleep(1.0)


async def _metrics_text(url: str, tenant_key: str) -> str:
    headers = {"Authorization": f"Bearer {tenant_key}"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(url, headers=headers) as response,
    ):
        return await response.text()


# -- the run --------------------------------------------------------------------------------------


def run_soak(
    shape: SoakShape,
    work: Path,
    limits: Limits,
    *,
    stuck_timeout: str,
    stuck_hold_s: float,
    slow_bytes_per_s: float,
    gateway_src: Path | None = None,
    say: Callable[[str], None] = print,
) -> list[Check]:
    work.mkdir(parents=True, exist_ok=True)
    keys = {
        "upstream lab-a key": f"sk-soak-a-{secrets.token_hex(16)}",
        "upstream lab-b key": f"sk-soak-b-{secrets.token_hex(16)}",
        "tenant key": f"sk-soak-tenant-{secrets.token_hex(16)}",
    }
    env = {
        **os.environ,
        "SOAK_LAB_A_KEY": keys["upstream lab-a key"],
        "SOAK_LAB_B_KEY": keys["upstream lab-b key"],
        "SOAK_TENANT_KEY": keys["tenant key"],
    }
    if gateway_src is not None:  # another build of the gateway, to compare two side by side
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(gateway_src), env.get("PYTHONPATH")]))
    scenario = work / "lab-scenario.yaml"
    scenario.write_text(_LAB_SCENARIO, encoding="utf-8")
    plans = plan_streams(shape)
    load_before = _loadavg()
    say(
        f"soak: {len(plans)} streams over {shape.seconds:g}s, seed {shape.seed}, in {work}; "
        f"load average {load_before}"
    )
    lab_ports = [free_port(), free_port()]
    labs = [f"http://127.0.0.1:{port}" for port in lab_ports]
    children = [
        Child(
            f"lab-{name}",
            steadystream_command(
                "lab", "--scenario", str(scenario), "--port", str(port), "--seed", str(seed)
            ),
            health_url=f"{url}/healthz",
            log=work / f"lab-{name}.log",
        )
        for name, port, url, seed in zip("ab", lab_ports, labs, (1, 2), strict=True)
    ]
    gateway_port = free_port()
    config = work / "gateway.yaml"
    config.write_text(
        _gateway_yaml(work, gateway_port, [f"{url}/v1" for url in labs], stuck_timeout),
        encoding="utf-8",
    )
    gateway = Child(
        "the gateway",
        [sys.executable, "-c", _GATEWAY_CODE, "gateway", "--config", str(config)],
        health_url=f"http://127.0.0.1:{gateway_port}/healthz",
        log=work / "gateway.log",
        env=env,
        # With tenants, the gateway may ask a key for /healthz (server.metrics_auth).
        health_headers={"Authorization": f"Bearer {keys['tenant key']}"},
    )
    target = Target(
        "127.0.0.1",
        gateway_port,
        keys["tenant key"],
        keys,
        slow_bytes_per_s=slow_bytes_per_s,
        stuck_hold_s=stuck_hold_s,
        stream_deadline_s=max(240.0, stuck_hold_s + 120.0),
    )
    rss: list[tuple[float, int]] = []
    started = time.monotonic()
    with contextlib.ExitStack() as running:  # stops each child by its pid, gateway first
        for child in [*children, gateway]:
            running.enter_context(child)
        assert gateway.pid is not None
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            results = runner.run(_load(plans, target, gateway.pid, rss, say))
            say(f"load done in {time.monotonic() - started:.0f}s; reading the labs' ground truth")
            truths = runner.run(_lab_truths(labs, settle_s=20.0))
            metrics = runner.run(
                _metrics_text(f"http://127.0.0.1:{gateway_port}/metrics", keys["tenant key"])
            )
    load_after = _loadavg()
    (work / "metrics.txt").write_text(metrics, encoding="utf-8")
    timelines = []
    for path in sorted((work / "recordings").glob("*.jsonl")):
        timelines += read_jsonl(path).timelines
    record_check, records = check_records(plans, timelines, results)
    noticed, freed, skipped = cancel_latencies_ms(plans, results, records, truths)
    echoes = sum(1 for plan in plans if plan.fault and plan.fault.startswith("echo-auth"))
    gateway_files = [work / "gateway.log", *sorted((work / "recordings").glob("*"))]
    checks = [
        record_check,
        check_open_upstreams(truths, echoes),
        check_rss(rss, limits),
        check_cancel(noticed, freed, skipped, limits),
        check_truncation(plans, results, limits),
        check_keys(keys, gateway_files, {"/metrics": metrics}, results),
    ]
    summary = {
        "command": " ".join(sys.argv),
        "shape": asdict(shape),
        "limits": asdict(limits),
        "seconds": time.monotonic() - started,
        "load_average": {"before": load_before, "after": load_after},
        "checks": [asdict(check) for check in checks],
        "clients": {rid: _client_summary(r) for rid, r in sorted(results.items())},
    }
    (work / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    say(f"done in {summary['seconds']:.0f}s; load average {load_before} -> {load_after}")
    return checks


def _client_summary(result: ClientResult) -> dict[str, Any]:
    data = asdict(result)
    data["leaked"] = sorted(result.leaked)
    return data


def print_checks(checks: Sequence[Check], say: Callable[[str], None] = print) -> None:
    for check in checks:
        say(f"{'PASS' if check.ok else 'FAIL'}  {check.name}: {check.summary}")
        for line in check.details:
            say(f"        {line}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="keep the run's files here (default: a temp dir)")
    parser.add_argument("--oversize", default="8MB", help="size of the oversized events")
    parser.add_argument("--silence", default="30s", help="a finish, then this long in silence")
    parser.add_argument("--long-tokens", type=int, default=1500, help="slow and stuck streams")
    # 15 s: a 3 KB/s reader's TCP drains come in gulps of its receive buffer, about 5 s apart;
    # with 5 s the gateway (rightly, at the TCP level) sees no drain and cuts it.
    parser.add_argument("--stuck-timeout", default="15s", help="the gateway's limits.stuck_timeout")
    parser.add_argument("--stuck-hold", default="60s", help="how long a stuck client reads nothing")
    parser.add_argument("--slow-rate", default="3KB", help="bytes per second a slow reader reads")
    parser.add_argument("--finish-bound", default="10s", help="finish -> [DONE] at the client")
    parser.add_argument("--cancel-p99-ms", type=float, default=100.0)
    parser.add_argument("--rss-slope", type=float, default=2.0, help="MiB per minute, at most")
    parser.add_argument(
        "--gateway-src",
        type=Path,
        help="run the gateway from this source tree (its src/ directory), e.g. another branch",
    )
    args = parser.parse_args(argv)
    if args.streams < len(KINDS) or args.minutes <= 0:
        parser.error(f"--streams must be at least {len(KINDS)} and --minutes above 0")
    try:
        shape = SoakShape(
            streams=args.streams,
            seconds=args.minutes * 60,
            seed=args.seed,
            oversize_bytes=parse_size(args.oversize, name="--oversize"),
            silence_s=parse_duration(args.silence, name="--silence") / 1e9,
            long_tokens=args.long_tokens,
        )
        limits = Limits(
            cancel_p99_ms=args.cancel_p99_ms,
            rss_slope_mib_per_min=args.rss_slope,
            finish_bound_s=parse_duration(args.finish_bound, name="--finish-bound") / 1e9,
        )
        stuck_hold_s = parse_duration(args.stuck_hold, name="--stuck-hold") / 1e9
        slow_rate = float(parse_size(args.slow_rate, name="--slow-rate"))
    except SpecError as exc:
        parser.error(str(exc))
    work = args.out or Path(tempfile.mkdtemp(prefix="steadystream-soak-"))
    checks = run_soak(
        shape,
        work,
        limits,
        stuck_timeout=args.stuck_timeout,
        stuck_hold_s=stuck_hold_s,
        slow_bytes_per_s=slow_rate,
        gateway_src=args.gateway_src,
    )
    print_checks(checks)
    failed = [check.name for check in checks if not check.ok]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed; files in {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
