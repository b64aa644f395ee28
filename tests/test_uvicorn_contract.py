"""What steadystream takes from uvicorn's internals, pinned (steadystream/_uvicorn.py).

Each internal the adapter reads or extends is checked here against the uvicorn that is
installed, which ``constraints.txt`` pins: an upgrade that moves one fails here, by name,
instead of a stream in production.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http import httptools_impl

from steadystream._serving import BackgroundServer, listening_socket
from steadystream._uvicorn import (
    KNOWN_VERSIONS,
    client_link,
    connection_of,
    frame,
    http_protocol,
    shutting_down,
)

ROOT = Path(__file__).resolve().parents[1]


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def test_the_installed_uvicorn_is_the_pinned_one_and_within_the_checked_range() -> None:
    pinned = re.search(r"^uvicorn==([\d.]+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned is not None, "constraints.txt pins no uvicorn"
    assert uvicorn.__version__ == pinned.group(1)
    first, last = KNOWN_VERSIONS
    assert first <= _version(uvicorn.__version__) <= last, (
        f"uvicorn {uvicorn.__version__} is outside the versions steadystream/_uvicorn.py was "
        f"checked against ({first} to {last}): check each internal there, then widen the range"
    )


class _Seen:
    def __init__(self) -> None:
        self.links: list[Any] = []
        self.cycles: list[Any] = []
        self.connections: list[Any] = []


def _app(seen: _Seen, server: list[uvicorn.Server]) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        cycle = getattr(send, "__self__", None)
        seen.cycles.append((cycle, cycle.chunked_encoding if cycle is not None else None))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.links.append(client_link(server[0])(scope, send))
        seen.connections.append(connection_of(server[0], scope))
        link = seen.links[-1]
        if link.frames:  # written between uvicorn's own sends, framed as its are
            link.transport.write(frame(b"direct "))
        await send({"type": "http.response.body", "body": b"sent", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def _ask(port: int, version: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET / HTTP/{version}\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        received = b""
        while not received.endswith(b"0\r\n\r\n") and (data := sock.recv(65536)):
            received += data
    return received


@pytest.mark.integration
def test_the_internals_the_adapter_uses_are_there_and_mean_what_it_takes_them_to() -> None:
    seen = _Seen()
    holder: list[uvicorn.Server] = []
    sock = listening_socket("127.0.0.1", 0)
    background = BackgroundServer(_app(seen, holder), sock, name="contract")
    holder.append(background.server)
    background.server.config.http = http_protocol(5.0)
    background.start()
    try:
        chunked = _ask(background.port, "1.1")
        close_delimited = _ask(background.port, "1.0")
    finally:
        background.stop()
    # uvicorn's send is its request-response cycle's method; chunked_encoding is None until
    # the head went out, then True for a response of unknown length.
    cycle, before = seen.cycles[0]
    assert isinstance(cycle, httptools_impl.RequestResponseCycle)
    assert before is None
    for name in ("scope", "transport", "chunked_encoding", "response_started"):
        assert hasattr(cycle, name), name
    for name in ("response_complete", "keep_alive", "expected_content_length"):
        assert hasattr(cycle, name), name
    # A frame written to the transport between its sends reads as one of its own chunks.
    head, _, body = chunked.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == frame(b"direct ") + frame(b"sent") + b"0\r\n\r\n"
    link_11, link_10 = seen.links
    assert link_11.frames
    assert link_11.transport is not None
    # HTTP/1.0: no chunks, the body raw, the close its end (the adapter's cycle class).
    assert not link_10.frames
    head, _, body = close_delimited.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"sent"
    # The server's state lists connections with their client and transport.
    for connection in seen.connections:
        assert connection is not None
        assert hasattr(connection, "client")
        assert hasattr(connection, "transport")


def test_the_protocol_class_extends_what_it_takes_to() -> None:
    protocol = http_protocol(1.0)
    assert issubclass(protocol, httptools_impl.HttpToolsProtocol)
    for name in ("connection_made", "data_received", "connection_lost", "on_headers_complete"):
        assert callable(getattr(httptools_impl.HttpToolsProtocol, name)), name
    init = httptools_impl.HttpToolsProtocol.__init__.__code__.co_names
    for name in ("cycle", "transport", "loop", "scope"):  # set by uvicorn's protocol itself
        assert name in init, name


def test_should_exit_is_the_flag_a_signal_sets_and_a_shutdown_is_told_by() -> None:
    # shutting_down() reads uvicorn's own flag: its signal handler sets it, and its main loop
    # and shutdown are started by it (the gateway ends the streams cancelled then in-band).
    server = uvicorn.Server(uvicorn.Config(_app(_Seen(), [])))
    asked = shutting_down(server)
    assert server.should_exit is False
    assert asked() is False
    server.handle_exit(15, None)  # (SIGTERM, as uvicorn's capture_signals hands it on)
    assert server.should_exit is True
    assert asked() is True
    source = Path(uvicorn.server.__file__).read_text()
    assert "self.should_exit" in source  # (the main loop's test, and the shutdown's start)
