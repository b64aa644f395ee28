"""What a hostile upstream or client can cost the gateway: one huge event, stuck clients.

    python benchmarks/bench_gateway_bounds.py --event-mb 20 40 --stuck 100

1. **Event cutter**: one SSE event of N MB arriving in 64 KiB reads, fed to the gateway's
   :class:`EventCutter` with no size limit. Time per event: a cutter that copies the half
   event on every read is quadratic in its size; the gateway's must be linear (and the limit,
   ``limits.max_event_bytes``, stops it long before).
2. **Stuck clients**: a lab (its own process, long answers) behind a gateway (its own
   process, ``stuck_timeout`` long enough that nobody is cut); N clients send a streaming
   request with a 4 KiB receive buffer and read nothing. The gateway's peak RSS over 30 s
   minus its idle RSS, over N, is what one stuck client costs it (the kernel's socket
   buffers are not in RSS).

Servers bind 127.0.0.1 on free ports and are stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from pathlib import Path

from steadystream._processes import Child, free_port, steadystream_command
from steadystream.gateway.events import EventCutter

READ = 65_536


def time_event(megabytes: int) -> float:
    """Seconds to cut one ``megabytes`` MB event fed in 64 KiB reads."""
    try:
        cutter = EventCutter(max_event_bytes=1 << 40)
    except TypeError:  # a cutter without a limit (before limits.max_event_bytes)
        cutter = EventCutter()
    chunk = b"x" * READ
    started = time.perf_counter()
    cutter.feed(b'data: {"pad": "')
    for _ in range(megabytes * 1_000_000 // READ):
        cutter.feed(chunk)
    cutter.feed(b'"}\n\n')
    return time.perf_counter() - started


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def stuck_clients(count: int, workdir: Path) -> tuple[float, float]:
    """(idle RSS MB, KiB of RSS per stuck client)."""
    lab_port, gw_port = free_port(), free_port()
    scenario = {
        "scheduler": {"step_base_ms": 2.0},
        "output": {"min_tokens": 20000, "max_tokens": 20000},
    }
    (workdir / "lab.yaml").write_text(json.dumps(scenario))
    lab_args = steadystream_command(
        "lab", "--scenario", str(workdir / "lab.yaml"), "--port", str(lab_port)
    )
    with Child("the lab", lab_args, health_url=f"http://127.0.0.1:{lab_port}/v1/models"):
        config = {
            "server": {"port": gw_port},
            "upstreams": [{"name": "lab", "base_url": f"http://127.0.0.1:{lab_port}/v1"}],
            "limits": {"stuck_timeout": "300s"},
            "watchdog": {"stall_timeout": "60s"},
        }
        (workdir / "gateway.yaml").write_text(json.dumps(config))
        gw_args = steadystream_command("gateway", "--config", str(workdir / "gateway.yaml"))
        with Child("the gateway", gw_args, health_url=f"http://127.0.0.1:{gw_port}/healthz") as gw:
            assert gw.pid is not None
            body = json.dumps(
                {"model": "lab", "messages": [{"role": "user", "content": "hi"}],
                 "stream": True, "max_tokens": 20000}
            ).encode()  # fmt: skip
            head = (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gw_port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            time.sleep(1)
            idle = rss_bytes(gw.pid)
            clients = []
            try:
                for _ in range(count):
                    sock = socket.socket()
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    sock.connect(("127.0.0.1", gw_port))
                    sock.sendall(head.encode() + body)
                    clients.append(sock)
                peak = idle
                for _ in range(30):
                    time.sleep(1)
                    peak = max(peak, rss_bytes(gw.pid))
            finally:
                for sock in clients:
                    sock.close()
    return idle / 2**20, (peak - idle) / count / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--event-mb", type=int, nargs="*", default=[20, 40])
    parser.add_argument("--stuck", type=int, default=100, help="stuck clients (0: skip)")
    args = parser.parse_args()
    for megabytes in args.event_mb:
        print(f"one {megabytes} MB event in 64 KiB reads: {time_event(megabytes):.3f} s")
    if args.stuck:
        with tempfile.TemporaryDirectory() as tmp:
            idle, per_client = stuck_clients(args.stuck, Path(tmp))
        print(f"{args.stuck} stuck clients: idle RSS {idle:.1f} MB, {per_client:.0f} KiB each")


if __name__ == "__main__":
    main()
