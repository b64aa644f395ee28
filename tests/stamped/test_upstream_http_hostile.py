"""The gateway's upstream HTTP/1.1 client against odd and hostile upstreams, end to end.

Each upstream is a scripted raw socket (tests/support/scripted.py) behind a real gateway: what
its client gets must be a clean stream, or an in-band error or a 5xx that names the cause, and
the gateway must close the upstream connection once the answer is over. A few limits are
also checked on the stamped connection alone, where the exact boundary matters. Every test
runs on both builds of the relay (tests/stamped/conftest.py).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import pytest

from steadystream import Outcome
from steadystream._exceptions import ProtocolError, UpstreamStreamError
from steadystream.gateway import GatewayServer
from steadystream.stamped import StampMode
from tests.support.gateway import MemorySink, Streamed, chat_body, gateway_config, post
from tests.support.scripted import SSE_HEAD, Script, ScriptedServer, chunked, exchange

pytestmark = pytest.mark.integration

Serve = Callable[..., ScriptedServer]


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "lab"}
    return b"data: " + orjson.dumps({**chunk, "choices": [choice]}) + b"\n\n"


_START = _event({"role": "assistant"}) + _event({"content": "a "}) + _event({"content": "b "})
_ANSWER = _START + _event({}, "stop") + b"data: [DONE]\n\n"
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
_CHUNKED = _HEAD + b"Transfer-Encoding: chunked\r\n"


@dataclass
class Relayed:
    streamed: Streamed
    upstream_closed: bool  # the gateway closed the upstream connection once it was done


def relay(script: Script, *, then: str = "wait") -> tuple[Relayed, MemorySink]:
    """One streamed request through a gateway to an upstream that runs ``script``, then
    ``then``: "wait" (at most 10 s) for the gateway to close the connection, "close" its
    side first (and wait), or "reset" the connection."""
    closed: list[bool] = []

    def then_wait(peer: socket.socket) -> None:
        try:
            script(peer)
        except (BrokenPipeError, ConnectionResetError):  # the gateway left mid-write
            closed.append(True)
            return
        if then == "reset":
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()
            closed.append(True)
            return
        if then == "close":
            peer.shutdown(socket.SHUT_WR)
        peer.settimeout(10.0)
        try:
            while peer.recv(65536):
                pass
            closed.append(True)
        except TimeoutError:
            closed.append(False)
        except OSError:  # reset by the gateway: closed too
            closed.append(True)

    upstream = ScriptedServer(then_wait)
    config = gateway_config(
        {"name": "only", "base_url": f"http://127.0.0.1:{upstream.port}/v1"},
        watchdog={"first_token_timeout": "5s", "stall_timeout": "5s"},
    )
    sink = MemorySink()
    try:
        with GatewayServer(config, recorder=sink) as gw:
            streamed = post(
                gw.base_url,
                "/chat/completions",
                chat_body(),
                {"X-Request-Id": "hostile"},
                timeout=15,
            )
    finally:
        upstream.close()
    return Relayed(streamed, closed == [True]), sink


def sends(data: bytes) -> Script:
    return lambda peer: peer.sendall(data)


# -- what a client of the gateway gets -----------------------------------------------------


def _framed_by(size_line: bytes, last: bytes = b"0") -> bytes:
    return _CHUNKED + b"\r\n" + size_line + b"\r\n" + _ANSWER + b"\r\n" + last + b"\r\n\r\n"


def one_byte_writes(data: bytes) -> Script:
    def script(peer: socket.socket) -> None:
        for at in range(len(data)):
            peer.sendall(data[at : at + 1])

    return script


_SIZE = b"%x" % len(_ANSWER)
_INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
_HTTP10 = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
# case: (the upstream's script, what it does then: "wait" for the gateway's close or "close")
CLEAN: dict[str, tuple[Script, str]] = {
    "chunk-extensions": (sends(_framed_by(_SIZE + b";name=value")), "wait"),
    "uppercase-hex": (sends(_framed_by(_SIZE.upper())), "wait"),
    "leading-zeros": (sends(_framed_by(b"000" + _SIZE, b"000")), "wait"),
    "trailers": (sends(_framed_by(_SIZE, b"0\r\nX-Trailer: 1")), "wait"),
    "interim-100-and-103": (sends(_INTERIM + _HEAD + b"\r\n" + _ANSWER), "wait"),
    "http10-close-delimited": (sends(_HTTP10 + _ANSWER), "close"),
    "keep-alive-then-close": (sends(_HEAD + b"Connection: keep-alive\r\n\r\n" + _ANSWER), "close"),
    "no-reason-phrase": (sends(_HEAD.replace(b" 200 OK", b" 200") + b"\r\n" + _ANSWER), "wait"),
    "non-ascii-header": (sends(_HEAD + b"X-Odd: caf\xe9 \xff\r\n\r\n" + _ANSWER), "wait"),
    "head-in-one-byte-writes": (one_byte_writes(_HEAD + b"\r\n" + _ANSWER), "wait"),
}


@pytest.mark.parametrize("case", sorted(CLEAN))
def test_odd_but_valid_answers_stream_cleanly(case: str) -> None:
    script, then = CLEAN[case]
    relayed, sink = relay(script, then=then)
    streamed = relayed.streamed
    assert (streamed.status, streamed.text, streamed.error) == (200, "a b ", None)
    assert streamed.done
    assert relayed.upstream_closed
    _, down = sink.edges("hostile")
    assert down.outcome is Outcome.COMPLETE


REFUSED = {
    "chunk-size-2**64": (
        _CHUNKED + b"\r\n" + b"10000000000000000\r\n" + _ANSWER,
        "wait",
        "Chunk size overflow",
    ),
    "chunk-size-without-crlf": (
        _CHUNKED + b"\r\n" + b"%x" % len(_ANSWER) + _ANSWER,
        "wait",
        "Invalid character in chunk size",
    ),
    "closed-after-a-chunked-head": (
        _CHUNKED + b"\r\n",
        "close",
        "closed the connection before the body ended",
    ),
    "reset-after-the-head": (_CHUNKED + b"\r\n", "reset", "reset"),
    "closed-mid-event": (
        _HEAD + b"\r\n" + _START + b'data: {"id"',
        "close",
        "mid-event",
    ),
    "closed-mid-chunk": (
        _CHUNKED + b"\r\n" + chunked(_START) + b"100\r\ndata: {",
        "close",
        "closed the connection before the body ended",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_broken_body_ends_the_stream_in_band_naming_the_cause(case: str) -> None:
    data, then, cause = REFUSED[case]
    relayed, sink = relay(sends(data), then=then)
    streamed = relayed.streamed
    assert streamed.status == 200
    assert streamed.error is not None
    assert cause in streamed.error, streamed.error
    assert streamed.done  # the in-band error, then [DONE]: never a silent end
    _, down = sink.edges("hostile")
    assert down.outcome is Outcome.ERROR


BAD_HEADS = {
    "content-length-and-chunked": (
        _CHUNKED + b"Content-Length: 10\r\n\r\n" + chunked(_ANSWER) + b"0\r\n\r\n",
        "Content-Length",
    ),
    "content-length-twice": (
        _HEAD + b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(_ANSWER) + _ANSWER,
        "Duplicate Content-Length",
    ),
    "obs-fold": (_HEAD + b"X-Folded: a\r\n b\r\n\r\n" + _ANSWER, "not valid HTTP/1.1"),
    "nul-in-a-value": (_HEAD + b"X-Nul: a\0b\r\n\r\n" + _ANSWER, "Invalid header value char"),
    "garbage-before-the-status-line": (b"garbage\r\n" + _HEAD + b"\r\n" + _ANSWER, "HTTP/"),
    "a-status-line-of-too-many-digits": (b"HTTP/1.1 2000 OK\r\n\r\n", "Invalid response status"),
    "switching-protocols": (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
        "101",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADS))
def test_a_head_that_is_not_http_gets_a_502_naming_the_cause(case: str) -> None:
    data, cause = BAD_HEADS[case]
    relayed, _ = relay(sends(data))
    streamed = relayed.streamed
    assert streamed.status == 502
    message = streamed.json()["error"]["message"]
    assert "'only'" in message or "HTTP 101" in message
    assert cause in message, message
    assert relayed.upstream_closed


def test_a_close_before_answering_gets_a_502_naming_it() -> None:
    relayed, _ = relay(sends(b""), then="close")
    assert relayed.streamed.status == 502
    message = relayed.streamed.json()["error"]["message"]
    assert "closed the connection without answering" in message, message


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n" + _ANSWER,
        _HEAD + b"Content-Length: 0\r\n\r\n" + _ANSWER,
    ],
    ids=["204-with-a-body", "length-0-with-a-body"],
)
def test_bytes_after_an_empty_answer_are_not_its_body(data: bytes) -> None:
    relayed, _ = relay(sends(data))
    streamed = relayed.streamed
    assert streamed.text == ""  # the bytes behind an empty answer are no answer
    assert streamed.error is not None
    assert "without [DONE]" in streamed.error
    assert relayed.upstream_closed


# -- the head's size: 64 KiB, status line included -----------------------------------------


def _head_of(size: int, *, in_reason: bool) -> bytes:
    """A head (status line, headers, blank line) of exactly ``size`` bytes."""
    if in_reason:
        start, end = b"HTTP/1.1 200 ", b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    else:
        start, end = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Pad: ", b"\r\n\r\n"
    head = start + b"a" * (size - len(start) - len(end)) + end
    assert len(head) == size
    return head


@pytest.mark.parametrize("in_reason", [False, True], ids=["in-a-header", "in-the-reason"])
@pytest.mark.parametrize("mode", [StampMode.KERNEL, StampMode.USER])
def test_a_head_of_64_kib_is_taken_and_one_byte_more_is_refused(
    serve: Serve, in_reason: bool, mode: StampMode
) -> None:
    body = chunked(b"data: one\n\n") + b"0\r\n\r\n"
    exact = serve(sends(_head_of(65536, in_reason=in_reason) + body))
    status, _, pieces = asyncio.run(exchange(exact.url, mode))
    assert (status, b"".join(data for _, data in pieces)) == (200, b"data: one\n\n")
    over = serve(sends(_head_of(65537, in_reason=in_reason) + body))
    with pytest.raises(ProtocolError, match="headers are larger than 65536 bytes"):
        asyncio.run(exchange(over.url, mode))


def test_a_status_line_of_twice_the_limit_is_refused(serve: Serve) -> None:
    # Was taken: the status line was counted only while the head was unfinished after a
    # read, and a head that ended in its second 64 KiB read was never counted at all.
    head = b"HTTP/1.1 200 " + b"a" * 130_000 + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = serve(sends(head + chunked(b"data: one\n\n") + b"0\r\n\r\n"))
    with pytest.raises(ProtocolError, match="headers are larger than 65536 bytes"):
        asyncio.run(exchange(server.url, StampMode.KERNEL))


def test_a_head_of_twice_the_limit_gets_a_502_from_the_gateway() -> None:
    head = b"HTTP/1.1 200 " + b"a" * 130_000 + b"\r\nContent-Type: text/event-stream\r\n\r\n"
    relayed, _ = relay(sends(head + _ANSWER))
    assert relayed.streamed.status == 502
    assert "headers are larger than 65536 bytes" in relayed.streamed.json()["error"]["message"]
    assert relayed.upstream_closed


# -- trailer fields ------------------------------------------------------------------------

_TRAILER_FLOOD = 4 << 20  # bytes of one trailer field's value the upstream sends at most


def endless_trailer(body: bytes) -> Script:
    """A chunked answer whose last chunk is followed by a trailer field that never ends."""

    def script(peer: socket.socket) -> None:
        peer.sendall(SSE_HEAD + body + b"0\r\nX-Endless: ")
        piece = b"a" * 65536
        for _ in range(_TRAILER_FLOOD // len(piece)):
            peer.sendall(piece)

    return script


@pytest.mark.parametrize("mode", [StampMode.KERNEL, StampMode.USER])
def test_a_trailer_field_that_never_ends_is_cut_off_by_its_size(
    serve: Serve, mode: StampMode
) -> None:
    # Was held whole by httptools (and copied anew on every read, stalling the loop) until
    # the upstream closed, then called a truncation.
    server = serve(endless_trailer(chunked(b"data: one\n\n")))
    with pytest.raises(ProtocolError, match="trailer fields are larger than 65536 bytes"):
        asyncio.run(exchange(server.url, mode, read_timeout_s=10.0))


def test_a_trailer_field_that_never_ends_fails_the_stream_in_band() -> None:
    relayed, sink = relay(endless_trailer(chunked(_START)))
    streamed = relayed.streamed
    assert streamed.text == "a b "
    assert streamed.error is not None
    assert "trailer fields are larger than 65536 bytes" in streamed.error, streamed.error
    assert streamed.done
    assert relayed.upstream_closed
    _, down = sink.edges("hostile")
    assert down.outcome is Outcome.ERROR


def test_trailer_fields_do_not_change_the_heads_headers(serve: Serve) -> None:
    trailers = b"0\r\nContent-Type: text/html\r\nRetry-After: 99999\r\n\r\n"
    server = serve(sends(SSE_HEAD + chunked(b"data: one\n\n") + trailers))
    status, headers, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert (status, b"".join(data for _, data in pieces)) == (200, b"data: one\n\n")
    assert headers["content-type"] == "text/event-stream"
    assert "retry-after" not in headers


def test_large_chunks_after_a_trailer_sized_body_are_still_taken(serve: Serve) -> None:
    # The count of bytes the parser may hold stops at each piece of body: a body of many
    # chunks, far past the limit in all, is no head and no trailer.
    events = [b"data: %d\n\n" % i for i in range(20_000)]
    body = b"".join(chunked(event) for event in events) + chunked(b"x" * 200_000)
    server = serve(sends(SSE_HEAD + body + b"0\r\nX-Small: 1\r\n\r\n"))
    status, _, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert status == 200
    assert b"".join(data for _, data in pieces) == b"".join(events) + b"x" * 200_000


# -- which framing: the parser's, not a guess at it ----------------------------------------


@pytest.mark.parametrize(
    "coding",
    [b"xchunked", b"chunked, identity", b"chunked\r\nTransfer-Encoding: identity"],
    ids=["xchunked", "chunked-then-identity", "two-lines-chunked-last-identity"],
)
def test_a_body_not_chunked_last_ends_with_the_close(serve: Serve, coding: bytes) -> None:
    # llhttp reads these bodies to the connection's end (chunked is not the last coding):
    # that end is the body's end, not a truncation ("connection lost mid-stream" before).
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n"
    server = serve(sends(head + b"data: one\n\n"))
    status, _, pieces = asyncio.run(exchange(server.url, StampMode.KERNEL))
    assert (status, b"".join(data for _, data in pieces)) == (200, b"data: one\n\n")


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"identity\r\nTransfer-Encoding: chunked"])
def test_a_body_chunked_last_cut_by_the_close_is_a_truncation(serve: Serve, coding: bytes) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n"
    server = serve(sends(head + chunked(b"data: one\n\n")))
    with pytest.raises(UpstreamStreamError, match="before the body ended"):
        asyncio.run(exchange(server.url, StampMode.KERNEL))
