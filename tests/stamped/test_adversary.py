"""The stamped connection against a hostile upstream: a head that never ends is bounded.

httptools holds a header line until its end arrives, so an endless header value (or status
line) grows memory without a bound unless the connection counts the head's bytes itself; and
a head dribbled a line at a time is never idle, so only a deadline for the whole head ends it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import pytest

from steadystream._exceptions import ProtocolError, UpstreamStreamError
from steadystream.stamped import StampMode
from tests.support.scripted import SSE_HEAD, Script, ScriptedServer, chunked, exchange

Serve = Callable[..., ScriptedServer]


def endless(start: bytes, piece: bytes, released: threading.Event) -> Script:
    """A head that goes on (64 MiB, far past any limit), then is held open until released:
    only the client's own bound can end the exchange with a head error."""

    def script(peer: socket.socket) -> None:
        peer.sendall(start)
        for _ in range((64 << 20) // len(piece)):
            if released.is_set():
                return
            peer.sendall(piece)
        released.wait(10.0)

    return script


def left_while_sending(server: ScriptedServer) -> bool:
    """The client went away while the server still wrote to it (its write was refused)."""
    server.close()  # (its script ends as its next write is refused)
    return any(isinstance(e, (BrokenPipeError, ConnectionResetError)) for e in server.errors)


@pytest.mark.parametrize(
    "start",
    [b"HTTP/1.1 200 OK\r\nX-Endless: ", b"HTTP/1.1 200 ", b"HTTP/1.1 200 OK\r\nX-Endless"],
    ids=["header-value", "status-line", "header-name"],
)
@pytest.mark.parametrize("mode", [StampMode.KERNEL, StampMode.USER])
def test_a_head_that_never_ends_is_cut_off_by_its_size(
    serve: Serve, start: bytes, mode: StampMode
) -> None:
    released = threading.Event()
    server = serve(endless(start, b"a" * 16_384, released))
    try:
        with pytest.raises(ProtocolError, match="headers are larger than 65536 bytes"):
            asyncio.run(exchange(server.url, mode, read_timeout_s=10.0))
        # refused after about 64 KiB, not once the server stopped sending
        assert left_while_sending(server)
    finally:
        released.set()


def test_a_head_dribbled_line_by_line_gets_the_read_timeout_in_all(serve: Serve) -> None:
    released = threading.Event()

    def dribble(peer: socket.socket) -> None:
        peer.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(400):  # a line every 50 ms, until the test is done (20 s at most)
            peer.sendall(b"X-Slow: a\r\n")
            if released.wait(0.05):
                return

    server = serve(dribble)
    try:
        with pytest.raises(UpstreamStreamError, match="head took longer than the read timeout"):
            asyncio.run(exchange(server.url, StampMode.KERNEL, read_timeout_s=0.4))
        # each read came within 0.4 s; the head as a whole did not: the client left while
        # the server still dribbled (not when it stopped)
        assert left_while_sending(server)
    finally:
        released.set()


def test_a_head_under_the_limit_with_its_body_in_the_same_read_is_taken(serve: Serve) -> None:
    head = SSE_HEAD.replace(b"\r\n\r\n", b"\r\nX-Pad: " + b"a" * 60_000 + b"\r\n\r\n")
    body = chunked(b"data: one\n\n") + b"0\r\n\r\n"
    server = serve(lambda peer: peer.sendall(head + body))
    status, headers, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert status == 200
    assert len(headers["x-pad"]) == 60_000
    assert b"".join(data for _, data in pieces) == b"data: one\n\n"


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"fffffffffffffffff\r\nabc", "Chunk size overflow"),
        (b"5" + b";a=b" * 20_000 + b"\r\nabcde\r\n0\r\n\r\n", None),
        (b"5\r\nabcdefgh\r\n0\r\n\r\n", "Expected LF after chunk data"),
    ],
    ids=["chunk-size-overflow", "chunk-extension-flood", "chunk-longer-than-its-size"],
)
def test_hostile_chunk_framing(serve: Serve, body: bytes, match: str | None) -> None:
    server = serve(lambda peer: peer.sendall(SSE_HEAD + body))
    if match is None:  # llhttp skips extensions without holding them: the body comes through
        status, _, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
        assert (status, b"".join(data for _, data in pieces)) == (200, b"abcde")
        return
    with pytest.raises(ProtocolError, match=match):
        asyncio.run(exchange(server.url, StampMode.KERNEL))


def test_bytes_after_a_content_length_body_are_not_taken_as_body(serve: Serve) -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n\r\nEXTRA"
    server = serve(lambda peer: peer.sendall(reply))
    status, _, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert (status, b"".join(data for _, data in pieces)) == (200, b"abc")


@pytest.mark.parametrize(
    ("head", "match"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Content-Length",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", "overflow"),
        (b"HTTP/1.1 200 OK\r\nX-\x00: a\r\n\r\n", "header token"),
    ],
    ids=["both-framings", "negative-length", "length-overflow", "nul-in-name"],
)
def test_hostile_heads_are_protocol_errors(serve: Serve, head: bytes, match: str) -> None:
    server = serve(lambda peer: peer.sendall(head + b"abc"))
    with pytest.raises(ProtocolError, match=match):
        asyncio.run(exchange(server.url, StampMode.KERNEL))


def test_interim_answers_are_skipped_for_the_final_one(serve: Serve) -> None:
    def interim(peer: socket.socket) -> None:
        peer.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        time.sleep(0.1)  # in a read of its own: the 1xx is parsed before the answer arrives
        peer.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n")
        time.sleep(0.1)
        peer.sendall(SSE_HEAD + chunked(b"data: one\n\n") + b"0\r\n\r\n")

    server = serve(interim)
    status, headers, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert status == 200
    assert "link" not in headers
    assert b"".join(data for _, data in pieces) == b"data: one\n\n"


def test_a_second_response_after_the_first_changes_nothing(serve: Serve) -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 500 No\r\nX-Evil: 1\r\n\r\nx"
    server = serve(lambda peer: peer.sendall(reply))
    status, headers, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert (status, b"".join(data for _, data in pieces)) == (200, b"abc")
    assert "x-evil" not in headers
