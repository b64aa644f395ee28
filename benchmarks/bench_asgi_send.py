"""What uvicorn's ASGI ``send`` costs per streamed event, against writing on its transport.

    python benchmarks/bench_asgi_send.py --streams 200 --events 200 --rounds 3 [--granian PYTHON]

The gateway hands each relayed event to uvicorn (httptools, uvloop) as an ASGI message; a
lower-level path would frame the chunk itself and write it on the connection's transport.
This measures the difference on its own: a server process streams ``--events`` SSE events of
about 150 bytes to each of ``--streams`` concurrent clients, one event per loop turn (as the
gateway hands on one read at a time), either through ``send`` (``asgi``) or with
``transport.write`` (``transport``), and reports its own CPU time per event, from
``getrusage`` around the streaming. The client (this process) only reads. Modes alternate
round by round, so a busy machine weighs on both alike. With ``--granian PYTHON`` (an
interpreter with granian installed, outside the project) the ``asgi`` app is also served by
granian, with one worker on uvloop.

Servers bind 127.0.0.1 on a free port and are stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

EVENT = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}\n\n'
)
MODES = ("asgi", "transport")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def make_app(
    mode: str,
    streams: int,
    events: int,
    report: Path,
    transport_of: Callable[[dict[str, Any]], asyncio.WriteTransport] | None = None,
) -> Callable[..., Awaitable[None]]:
    """The streaming app: ``events`` events to each request, CPU time reported once
    ``streams`` requests are done."""
    started: list[float] = []
    done = 0

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal done
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        transport = transport_of(scope) if transport_of is not None else None
        if not started:
            started.append(cpu_seconds())
        for _ in range(events):
            await asyncio.sleep(0)  # one event per loop turn, as reads come in
            if transport is None:
                await send({"type": "http.response.body", "body": EVENT, "more_body": True})
            else:
                transport.write(b"%x\r\n%b\r\n" % (len(EVENT), EVENT))
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        done += 1
        if done == streams:
            report.write_text(json.dumps({"cpu_s": cpu_seconds() - started[0]}))

    return app


def granian_app(scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[None]:
    """The ``asgi`` app under granian (configured from the environment its worker inherits)."""
    global _granian_app
    if _granian_app is None:
        config = json.loads(os.environ["BENCH_ASGI_SEND"])
        _granian_app = make_app("asgi", config["streams"], config["events"], Path(config["report"]))
    return _granian_app(scope, receive, send)


_granian_app: Callable[..., Awaitable[None]] | None = None


def serve(mode: str, port: int, streams: int, events: int, report: Path) -> None:
    """The server process: stream to ``streams`` clients, write CPU seconds to ``report``."""
    if mode == "granian":
        from granian import Granian  # type: ignore[import-not-found]

        os.environ["BENCH_ASGI_SEND"] = json.dumps(
            {"streams": streams, "events": events, "report": str(report)}
        )
        sys.path.insert(0, str(Path(__file__).parent))
        Granian(
            "bench_asgi_send:granian_app",
            address="127.0.0.1",
            port=port,
            interface="asgi",
            workers=1,
            loop="uvloop",
            log_enabled=False,
        ).serve()
        return

    import uvicorn

    def transport_of(scope: dict[str, Any]) -> asyncio.WriteTransport:
        client = tuple(scope["client"])
        for connection in server.server_state.connections:
            if getattr(connection, "client", None) == client:
                return connection.transport
        raise RuntimeError("no connection for this request")

    app = make_app(mode, streams, events, report, transport_of if mode == "transport" else None)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            loop="uvloop",
            http="httptools",
            lifespan="off",
            log_level="warning",
            access_log=False,
        )
    )
    server.run()


def read_all(port: int, streams: int) -> None:
    """Open ``streams`` connections, ask each for its stream, read every one to its end."""
    selector = selectors.DefaultSelector()
    request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    tails: dict[socket.socket, bytes] = {}
    for _ in range(streams):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(request)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        tails[sock] = b""
    deadline = time.monotonic() + 300
    while tails and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            fileobj = key.fileobj
            assert isinstance(fileobj, socket.socket)
            sock = fileobj
            data = sock.recv(1 << 16)
            tail = (tails[sock] + data)[-5:]
            if not data or tail == b"0\r\n\r\n":
                selector.unregister(sock)
                sock.close()
                del tails[sock]
            else:
                tails[sock] = tail
    if tails:
        raise RuntimeError(f"{len(tails)} streams did not end within 300 s")


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the server exited before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not listen within 20 s")


def one_run(mode: str, streams: int, events: int, workdir: Path, python: str) -> float:
    """Server CPU microseconds per event for one run of ``mode``."""
    from steadystream._processes import free_port  # not in the server's Python (granian)

    port = free_port()
    report = workdir / f"{mode}-{port}.json"
    args = [python, __file__, "--serve", mode, str(port), str(streams), str(events)]
    process = subprocess.Popen([*args, str(report)])
    try:
        wait_for_port(port, process)
        read_all(port, streams)
        deadline = time.monotonic() + 20
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu_s = float(json.loads(report.read_text())["cpu_s"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return cpu_s / (streams * events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--granian",
        metavar="PYTHON",
        help="also serve the asgi mode with granian, run by this Python (granian installed)",
    )
    parser.add_argument("--serve", nargs=5, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        mode, port, streams, events, report = args.serve
        serve(mode, int(port), int(streams), int(events), Path(report))
        return
    modes = (*MODES, "granian") if args.granian else MODES
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for mode in modes if round_ % 2 == 0 else modes[::-1]:
                python = args.granian if mode == "granian" else sys.executable
                per_event = one_run(mode, args.streams, args.events, Path(folder), python)
                results[mode].append(per_event)
                print(f"round {round_ + 1}: {mode:9} {per_event:6.2f} µs/event", flush=True)
    medians = {mode: statistics.median(values) for mode, values in results.items()}
    shown = ", ".join(f"{mode} {value:.2f} µs" for mode, value in medians.items())
    print(f"median server CPU per event: {shown}")
    for mode in modes[1:]:
        print(f"{mode} / asgi: {medians[mode] / medians['asgi']:.2f}")


if __name__ == "__main__":
    main()
