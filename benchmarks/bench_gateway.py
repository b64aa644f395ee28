"""What the gateway adds per event, against a direct connection and other proxies, in one run.

    python benchmarks/bench_gateway.py --streams 100 500
    python benchmarks/bench_gateway.py --streams 100 500 --litellm PEERS/litellm/bin/litellm

One lab (its own process) serves every phase. Each phase streams N concurrent requests to it
through one path: ``direct``, ``gateway`` (steadystream, no pacer), ``nginx`` (a plain reverse
proxy with buffering off) and ``litellm`` (LiteLLM's proxy), each in its own process, started
and stopped here by pid. The load generator is this process.

Two more paths, not run by default, price TLS on the gateway's upstream hop:
``gateway-front`` is the gateway with an nginx front (plain HTTP) between it and the lab, and
``gateway-tls`` the same with the front serving HTTPS on a throwaway self-signed certificate
(the gateway trusts it through ``SSL_CERT_FILE``). The front talks plain HTTP to the lab, so
the two differ only in TLS. The fronts are not proxies under test: only the gateway's CPU and
memory are counted.

Added latency, fairly: for every event the lab records when it handed it to its server
(ground truth, ``--record``); the client stamps its arrival. Both are wall-clock instants on
one machine, so ``arrival - written`` is the path's delivery latency per event, whatever the
lab's own pauses. A path's added latency is its latency percentile minus the direct path's, at
the same N, in the same run. Events are matched to the truth by request id (``X-Request-Id``
passes through every path; LiteLLM's proxy hands the lab's id back as
``llm_provider-x-request-id``) and by position.

Also per proxy: events relayed per second of the proxy's own CPU time, and resident memory per
stream (the proxy's peak RSS during the phase minus its idle RSS, over N). For the gateway,
its own added latency as it measures it (``own``): every event's hand-off to the client minus
its arrival from the lab, the kernel's receive stamp (``steadystream_added_latency_seconds``,
scraped before and after the phase; percentiles interpolated within buckets as PromQL's
``histogram_quantile`` does). It needs no truth from the lab and no direct phase, and the
client's own delays do not enter it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import orjson

from steadystream._processes import free_port
from steadystream._transport_errors import TRANSPORT_ERRORS
from steadystream.files import read_timelines
from steadystream.protocol import SseDecoder, SseEvent

_CLI = "from steadystream.cli import main; main()"
BENCH_KEY = "sk-bench-local-only"  # LiteLLM's proxy refuses to start without a master key
_TICKS = os.sysconf("SC_CLK_TCK")


def wait_ready(url: str, timeout: float = 60.0, cafile: Path | None = None) -> None:
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=str(cafile)) if cafile is not None else None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up") from None
            time.sleep(0.2)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    base_url: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_seconds(self) -> tuple[float, float]:
        return _cpu_of(self.pid)

    def rss_bytes(self) -> int:
        # nginx and uvicorn may run workers: count the process and its children.
        total = 0
        for pid in [self.pid, *_children(self.pid)]:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)  # uvicorn and nginx shut down cleanly on it
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            found += [int(child), *_children(int(child))]
    return found


def _cpu_of(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of one process (utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def children_cpu(process: Process) -> tuple[float, float]:
    """User and system CPU seconds of a proxy and its workers."""
    user, system = process.cpu_seconds()
    for pid in _children(process.pid):
        with contextlib.suppress(OSError):
            more = _cpu_of(pid)
            user, system = user + more[0], system + more[1]
    return user, system


def start(
    name: str, argv: list[str], base_url: str, ready: str, env: dict[str, str],
    cafile: Path | None = None,
) -> Process:  # fmt: skip
    log = open(Path(env["BENCH_DIR"]) / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
    popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    process = Process(name, popen, base_url)
    try:
        wait_ready(ready, cafile=cafile)
    except RuntimeError:
        process.stop()
        raise
    return process


def start_lab(work: Path, env: dict[str, str], step_ms: float, tokens: int) -> Process:
    port = free_port()
    scenario = work / "scenario.yaml"
    scenario.write_text(
        f"scheduler: {{step_base_ms: {step_ms}, step_per_seq_ms: 0.0, max_running: 4096}}\n"
        f"output: {{min_tokens: {tokens}, max_tokens: {tokens}}}\n"
        "server: {keep_requests: 100000}\n",
        encoding="utf-8",
    )
    argv = [sys.executable, "-c", _CLI, "lab", "--scenario", str(scenario), "--port", str(port)]
    argv += ["--record", str(work / "truth.jsonl")]
    url = f"http://127.0.0.1:{port}"
    return start("lab", argv, f"{url}/v1", f"{url}/healthz", env)


def start_gateway(
    env: dict[str, str], lab: Process, upstream: str | None = None, name: str = "gateway"
) -> Process:
    """The gateway in front of ``upstream`` (the lab's base URL unless given)."""
    port = free_port()
    upstream = upstream or lab.base_url
    argv = [sys.executable, "-c", _CLI, "gateway", "--upstream", upstream, "--port", str(port)]
    if os.environ.get("BENCH_GATEWAY_ARGV"):  # e.g. a profiler around the same gateway
        argv = [*os.environ["BENCH_GATEWAY_ARGV"].split(), upstream, str(port)]
    url = f"http://127.0.0.1:{port}"
    return start(name, argv, f"{url}/v1", f"{url}/healthz", env)


def self_signed(work: Path) -> tuple[Path, Path]:
    """A throwaway certificate and key for 127.0.0.1 and localhost, valid one day."""
    cert, key = work / "front-cert.pem", work / "front-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def start_nginx(
    work: Path, env: dict[str, str], lab: Process, binary: str,
    name: str = "nginx", tls: tuple[Path, Path] | None = None,
) -> Process:  # fmt: skip
    """nginx before the lab, plain or (``tls``: certificate and key) HTTPS to its clients."""
    port = free_port()
    lab_host = lab.base_url.removeprefix("http://").removesuffix("/v1")
    prefix = work / name
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    listen = f"listen 127.0.0.1:{port};"
    if tls is not None:
        listen = (
            f"listen 127.0.0.1:{port} ssl;\n    ssl_certificate {tls[0]};\n"
            f"    ssl_certificate_key {tls[1]};"
        )
    conf.write_text(
        f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream lab {{ server {lab_host}; keepalive 512; }}
  server {{
    {listen}
    location / {{
      proxy_pass http://lab;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }}
  }}
}}
""",
        encoding="utf-8",
    )
    argv = [binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off; master_process off;"]
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    cafile = tls[0] if tls is not None else None
    return start(name, argv, f"{url}/v1", f"{url}/healthz", env, cafile)


def start_litellm(work: Path, env: dict[str, str], lab: Process, binary: str) -> Process:
    port = free_port()
    conf = work / "litellm.yaml"
    conf.write_text(
        "model_list:\n"
        "  - model_name: lab\n"
        "    litellm_params: {model: openai/lab, api_base: '" + lab.base_url + "', api_key: x}\n"
        "litellm_settings: {telemetry: false, drop_params: true}\n",
        encoding="utf-8",
    )
    child_env = {
        **env,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MASTER_KEY": BENCH_KEY,
    }
    argv = [binary, "--config", str(conf), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", "1"]
    url = f"http://127.0.0.1:{port}"
    return start("litellm", argv, f"{url}/v1", f"{url}/health/liveliness", child_env)


# -- the load generator -------------------------------------------------------------------------


@dataclass
class StreamResult:
    request_id: str
    lab_id: str
    arrivals_ns: list[int] = field(default_factory=list)
    error: str | None = None


async def one_stream(
    session: aiohttp.ClientSession, url: str, request_id: str, tokens: int, delay: float
) -> StreamResult:
    await asyncio.sleep(delay)
    body = {
        "model": "lab",
        "messages": [{"role": "user", "content": "Measure me."}],
        "stream": True,
        "max_tokens": tokens,
    }
    result = StreamResult(request_id, request_id)
    decoder = SseDecoder()
    try:
        async with session.post(
            f"{url}/chat/completions", data=orjson.dumps(body),
            headers={
                "Content-Type": "application/json",
                "X-Request-Id": request_id,
                "Authorization": f"Bearer {BENCH_KEY}",
            },
        ) as response:  # fmt: skip
            result.lab_id = response.headers.get("llm_provider-x-request-id", request_id)
            if response.status != 200:
                result.error = f"HTTP {response.status}"
                return result
            arrivals = result.arrivals_ns
            while data := await response.content.readany():
                now = time.perf_counter_ns()
                for item in decoder.feed(data):
                    if isinstance(item, SseEvent) and item.data != "[DONE]":
                        arrivals.append(now)
    except TRANSPORT_ERRORS as exc:
        result.error = str(exc)
    return result


async def run_phase(
    url: str, label: str, streams: int, tokens: int, ramp_s: float
) -> list[StreamResult]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [
            one_stream(session, url, f"{label}-{i}", tokens, ramp_s * i / streams)
            for i in range(streams)
        ]
        return list(await asyncio.gather(*tasks))


def latencies_ms(
    results: list[StreamResult], truth_path: Path, wall_minus_perf: float
) -> np.ndarray:
    """Per-event delivery latency (client arrival - lab write), in ms, every stream pooled."""
    wanted = {r.lab_id for r in results if r.error is None}
    truths = {t.stream_id: t for t in read_timelines(truth_path).timelines if t.stream_id in wanted}
    values: list[np.ndarray] = []
    for result in results:
        truth = truths.get(result.lab_id)
        if truth is None or result.error is not None or truth.started_at is None:
            continue
        count = min(len(truth.times), len(result.arrivals_ns))
        written = truth.started_at + truth.times[:count] / 1e9
        arrived = wall_minus_perf + np.asarray(result.arrivals_ns[:count]) / 1e9
        values.append((arrived - written) * 1e3)
    return np.concatenate(values) if values else np.array([])


@dataclass
class PhaseResult:
    path: str
    streams: int
    events: int
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    wall_s: float
    proxy_cpu_s: float | None = None
    rss_per_stream_kib: float | None = None
    own_p50_ms: float | None = None  # the gateway's own histogram (exact per event, bucketed)
    own_p99_ms: float | None = None
    proxy_sys_s: float | None = None  # the kernel's part of proxy_cpu_s (reads, writes, epoll)


_ADDED = "steadystream_added_latency_seconds"


def added_buckets(proxy: Process) -> dict[float, float]:
    """The gateway's ``steadystream_added_latency_seconds`` buckets (cumulative, all labels)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    origin = proxy.base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{origin}/metrics", timeout=10) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{_ADDED}_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """``histogram_quantile`` over the phase's share of the buckets (ms), as PromQL does."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower * 1e3
            share = (rank - below) / (count - below) if count > below else 1.0
            return (lower + (bound - lower) * share) * 1e3
        lower, below = bound, count
    return lower * 1e3


def measure(
    path: str, url: str, proxy: Process | None, lab: Process, work: Path,
    streams: int, tokens: int, ramp_s: float,
) -> PhaseResult:  # fmt: skip
    label = f"{path}-{streams}-{time.monotonic_ns()}"
    gateway = proxy if path.startswith("gateway") else None  # its own histogram, too
    own_before = added_buckets(gateway) if gateway is not None else None
    idle_rss = proxy.rss_bytes() if proxy is not None else 0
    peak_rss = idle_rss
    cpu_before = children_cpu(proxy) if proxy is not None else (0.0, 0.0)
    wall_minus_perf = time.time() - time.perf_counter_ns() / 1e9
    started = time.perf_counter()

    async def sample_and_run() -> list[StreamResult]:
        nonlocal peak_rss
        phase = asyncio.ensure_future(run_phase(url, label, streams, tokens, ramp_s))
        while not phase.done():
            if proxy is not None:
                peak_rss = max(peak_rss, proxy.rss_bytes())
            await asyncio.wait({phase}, timeout=0.1)
        return phase.result()

    results = asyncio.run(sample_and_run())
    wall = time.perf_counter() - started
    cpu_after = children_cpu(proxy) if proxy is not None else None
    cpu = sys_cpu = None
    if cpu_after is not None:
        sys_cpu = cpu_after[1] - cpu_before[1]
        cpu = cpu_after[0] - cpu_before[0] + sys_cpu
    time.sleep(0.5)  # the lab records a request once its writer is done
    lat = latencies_ms(results, work / "truth.jsonl", wall_minus_perf)
    events = sum(len(r.arrivals_ns) for r in results)
    p50, p90, p99 = (float(np.percentile(lat, q)) for q in (50, 90, 99)) if len(lat) else (
        float("nan"),) * 3  # fmt: skip
    own50 = own99 = None
    if own_before is not None and proxy is not None:
        own_after = added_buckets(proxy)
        own50 = bucket_quantile(own_before, own_after, 0.5)
        own99 = bucket_quantile(own_before, own_after, 0.99)
    return PhaseResult(
        path, streams, events, sum(r.error is not None for r in results), p50, p90, p99, wall,
        cpu, (peak_rss - idle_rss) / streams / 1024 if proxy is not None else None,
        own50, own99, sys_cpu,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--step-ms", type=float, default=50.0, help="the lab's decode step")
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds over which streams start")
    parser.add_argument("--paths", nargs="+", default=["direct", "gateway", "nginx", "litellm"])
    parser.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    parser.add_argument("--litellm", default=None, help="the litellm proxy command")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    env = {**os.environ, "BENCH_DIR": str(work)}
    processes: dict[str, Process] = {}
    skipped: dict[str, str] = {}
    results: list[PhaseResult] = []
    try:
        lab = processes["lab"] = start_lab(work, env, args.step_ms, args.tokens)
        for path in dict.fromkeys(args.paths):  # a path named twice is measured twice, started once
            try:
                if path == "gateway":
                    processes[path] = start_gateway(env, lab)
                elif path == "nginx":
                    processes[path] = start_nginx(work, env, lab, args.nginx)
                elif path in ("gateway-front", "gateway-tls"):
                    processes[path] = start_fronted(path, work, env, lab, args.nginx, processes)
                elif path == "litellm":
                    if args.litellm is None:
                        raise RuntimeError("no --litellm command given")
                    processes[path] = start_litellm(work, env, lab, args.litellm)
            except (OSError, RuntimeError) as exc:
                skipped[path] = str(exc)
        paths = [p for p in args.paths if p not in skipped]
        for streams in args.streams:
            for path in paths:
                proxy = processes.get(path)
                url = lab.base_url if path == "direct" else proxy.base_url  # type: ignore[union-attr]
                # A short warm-up: connection pools, imports, JIT-free but cache-warm.
                measure(path, url, proxy, lab, work, min(streams, 20), 5, 0.2)
                result = measure(path, url, proxy, lab, work, streams, args.tokens, args.ramp)
                results.append(result)
                print(json.dumps(result.__dict__), flush=True)
    finally:
        for process in reversed(list(processes.values())):
            process.stop()
    report(results, skipped)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"results": [r.__dict__ for r in results], "skipped": skipped}, indent=1)
        )
    print(f"logs and truth in {work}")


def start_fronted(
    path: str, work: Path, env: dict[str, str], lab: Process, binary: str,
    processes: dict[str, Process],
) -> Process:  # fmt: skip
    """The gateway behind an nginx front to the lab: plain (``gateway-front``) or HTTPS
    (``gateway-tls``). The front goes into ``processes`` (before the gateway, which stops
    first) but is never measured."""
    tls = self_signed(work) if path == "gateway-tls" else None
    front_name = "front-tls" if tls else "front"
    front = processes[front_name] = start_nginx(work, env, lab, binary, front_name, tls)
    gateway_env = {**env, "SSL_CERT_FILE": str(tls[0])} if tls else env
    return start_gateway(gateway_env, lab, front.base_url, path)


def report(results: list[PhaseResult], skipped: dict[str, str]) -> None:
    direct = {r.streams: r for r in results if r.path == "direct"}
    print()
    print("| path | streams | events | errors | p50 ms | p99 ms | added p50 ms | added p99 ms "
          "| own p50 / p99 ms | events/s per proxy CPU s | µs per event: user + sys "
          "| proxy RSS KiB/stream |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        base = direct.get(r.streams)
        added50 = r.p50_ms - base.p50_ms if base and r.path != "direct" else None
        added99 = r.p99_ms - base.p99_ms if base and r.path != "direct" else None
        rate = r.events / r.proxy_cpu_s if r.proxy_cpu_s else None
        split = "—"
        if r.proxy_cpu_s and r.proxy_sys_s is not None and r.events:
            user_us = (r.proxy_cpu_s - r.proxy_sys_s) / r.events * 1e6
            split = f"{user_us:.1f} + {r.proxy_sys_s / r.events * 1e6:.1f}"
        print(
            f"| {r.path} | {r.streams} | {r.events} | {r.errors} | {r.p50_ms:.2f} | "
            f"{r.p99_ms:.2f} | {_fmt(added50)} | {_fmt(added99)} | "
            f"{_fmt(r.own_p50_ms, 3)} / {_fmt(r.own_p99_ms, 3)} | {_fmt(rate, 0)} | {split} | "
            f"{_fmt(r.rss_per_stream_kib, 1)} |"
        )
    for path, why in skipped.items():
        print(f"skipped {path}: {why}")
    for line in against_nginx(results) + tls_upstream(results):
        print(line)


def against_nginx(results: list[PhaseResult]) -> list[str]:
    """Issue 16's targets, where the gateway and nginx ran at the same concurrency: events
    per proxy CPU-second at least half of nginx's; added p99 within nginx's + 3 ms."""
    found = {(r.path, r.streams): r for r in results}
    lines = []
    for (path, streams), gateway in found.items():
        nginx = found.get(("nginx", streams))
        if path != "gateway" or nginx is None:
            continue
        if not (gateway.proxy_cpu_s and nginx.proxy_cpu_s):
            continue
        ratio = (gateway.events / gateway.proxy_cpu_s) / (nginx.events / nginx.proxy_cpu_s)
        over = gateway.p99_ms - nginx.p99_ms  # the direct path's p99 cancels out
        lines.append(
            f"{streams} streams: gateway/nginx events per CPU-second {ratio:.2f} (target >= 0.5, "
            f"{'met' if ratio >= 0.5 else 'not met'}); added p99 {over:+.1f} ms over nginx's "
            f"(target <= +3 ms, {'met' if over <= 3 else 'not met'})"
        )
    return lines


def tls_upstream(results: list[PhaseResult]) -> list[str]:
    """Issue 25's target, where both fronted gateways ran at the same concurrency: with TLS to
    its upstream the gateway relays at least 85 % of the events per CPU-second it does without."""
    found = {(r.path, r.streams): r for r in results}
    lines = []
    for (path, streams), tls in found.items():
        plain = found.get(("gateway-front", streams))
        if path != "gateway-tls" or plain is None:
            continue
        if not (tls.proxy_cpu_s and plain.proxy_cpu_s):
            continue
        ratio = (tls.events / tls.proxy_cpu_s) / (plain.events / plain.proxy_cpu_s)
        lines.append(
            f"{streams} streams: TLS upstream: gateway-tls/gateway-front events per CPU-second "
            f"{ratio:.2f} (target >= 0.85, {'met' if ratio >= 0.85 else 'not met'})"
        )
    return lines


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
