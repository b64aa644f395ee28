"""The soak's clients: one raw HTTP/1.1 connection per stream, read the way its kind reads.

Raw sockets rather than an HTTP library, because the soak needs what libraries hide: a small
receive buffer (so a slow or stuck reader pushes back on the gateway at once instead of
parking megabytes in the kernel), reads of a chosen size at a chosen pace, and a choice of
leaving with a clean close or a reset. httptools (uvicorn's parser) takes the chunked body
apart; the project's SSE decoder cuts it into events.

Every byte received is also scanned for the run's secrets: a key must never reach a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson

from _soak_plan import StreamPlan
from steadystream.protocol import SseDecoder, SseEvent

__all__ = ["PIECE", "ClientResult", "KeyScanner", "Target", "key_pieces", "run_stream"]

# Receive buffers of the readers that push back. A stuck reader's is tiny, so the gateway's
# buffers fill soon. A slow reader's is 16 KiB, read 512 bytes at a time (_read_slowly): with
# 4 KiB, loopback TCP (64 KiB segments) moved its bytes in bursts seconds apart.
_RCVBUF = {"stuck": 4096, "slow": 16384}
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass(frozen=True)
class Target:
    """Where the clients go, and how they behave."""

    host: str
    port: int
    tenant_key: str
    secrets: dict[str, str]  # name -> value, scanned for in every byte received
    slow_bytes_per_s: float = 3000.0
    stuck_hold_s: float = 45.0
    stream_deadline_s: float = 240.0


PIECE = 12  # hex characters of a key's secret part that count as a leak


def key_pieces(value: str) -> list[bytes]:
    """The first and the last PIECE characters of a key's random part (after its last ``-``).

    A relay that cuts a message short may show only the start of a key (or, cutting the head,
    its end), where a pattern that redacts whole keys no longer matches: 12 hex characters of
    the secret count as a leak (48 bits: no match by chance in a few megabytes).
    """
    secret = value.rsplit("-", 1)[-1].encode()
    return [secret[:PIECE], secret[-PIECE:]]


class KeyScanner:
    """Finds secrets, or pieces of them, in a byte stream read in pieces (a key may straddle
    two reads)."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self._pieces = {name: key_pieces(value) for name, value in secrets.items()}
        self._tail = b""
        self.found: set[str] = set()

    def feed(self, data: bytes) -> None:
        window = self._tail + data
        for name, pieces in self._pieces.items():
            if name not in self.found and any(piece in window for piece in pieces):
                self.found.add(name)
        self._tail = window[-(PIECE - 1) :]


@dataclass
class ClientResult:
    """What one client saw. Times: ``time.time()`` (wall clock, comparable with the lab's)."""

    request_id: str
    kind: str
    status: int | None = None
    content_events: int = 0
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None  # the in-band error's message
    bad_chunks: int = 0  # data that was neither JSON nor [DONE]
    largest_event: int = 0
    body_bytes: int = 0
    ended: str = ""  # eof, reset, left, deadline, connect-failed
    sent_at: float = 0.0
    finish_at: float | None = None
    end_at: float | None = None
    left_at: float | None = None  # when this client closed its connection on purpose
    leaked: set[str] = field(default_factory=set)

    @property
    def answered(self) -> bool:
        """The stream ended as the gateway promises: [DONE] after a finish or an error."""
        return self.done and (self.finish_reason is not None or self.error is not None)


class _Parser:
    """httptools callbacks: the status, then body pieces as they come."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status: int | None = None
        self.body: list[bytes] = []
        self.complete = False

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _Stream:
    def __init__(self, plan: StreamPlan, target: Target) -> None:
        self.plan = plan
        self.target = target
        self.result = ClientResult(plan.request_id, plan.kind.name)
        self.http = _Parser()
        self.sse = SseDecoder()
        self.scanner = KeyScanner(target.secrets)

    def request(self) -> bytes:
        body = orjson.dumps(self.plan.body)
        headers = [
            f"POST {self.plan.path} HTTP/1.1",
            f"Host: {self.target.host}:{self.target.port}",
            f"Authorization: Bearer {self.target.tenant_key}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            f"X-Request-Id: {self.plan.request_id}",
            "Connection: close",
        ]
        if self.plan.fault:
            headers.append(f"X-Lab-Fault: {self.plan.fault}")
        return ("\r\n".join(headers) + "\r\n\r\n").encode() + body

    def take(self, data: bytes) -> None:
        """One read: scan it, parse it, count its events."""
        self.scanner.feed(data)
        self.http.parser.feed_data(data)
        self.result.status = self.http.status
        pieces, self.http.body = self.http.body, []
        for piece in pieces:
            self.result.body_bytes += len(piece)
            for item in self.sse.feed(piece):
                if isinstance(item, SseEvent):
                    self._event(item)

    def _event(self, event: SseEvent) -> None:
        result = self.result
        result.largest_event = max(result.largest_event, event.wire_bytes)
        if event.data == "[DONE]":
            result.done = True
            return
        try:
            chunk: Any = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            result.bad_chunks += 1
            return
        if not isinstance(chunk, dict):
            result.bad_chunks += 1
            return
        if "error" in chunk:
            error = chunk["error"]
            result.error = str(error.get("message") if isinstance(error, dict) else error)
            return
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content") or choice.get("text"):
                result.content_events += 1
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
                result.finish_at = time.time()


async def run_stream(plan: StreamPlan, target: Target) -> ClientResult:
    """Send one request and read its answer the way its kind reads; never raises."""
    stream = _Stream(plan, target)
    result = stream.result
    reader = plan.kind.reader
    rcvbuf = _RCVBUF.get(reader)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    writer: asyncio.StreamWriter | None = None
    try:
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (target.host, target.port)), 10)
        if reader == "slow":
            result.sent_at = time.time()
            await loop.sock_sendall(sock, stream.request())
            await asyncio.wait_for(_read_slowly(stream, sock), timeout=target.stream_deadline_s)
            return result
        stream_reader, writer = await asyncio.open_connection(sock=sock, limit=rcvbuf or 1 << 16)
        result.sent_at = time.time()
        writer.write(stream.request())
        await writer.drain()
        await asyncio.wait_for(
            _read(stream, stream_reader, writer, sock), timeout=target.stream_deadline_s
        )
    except TimeoutError:
        result.ended = result.ended or "deadline"
    except (ConnectionError, OSError) as exc:
        result.ended = result.ended or ("reset" if _is_reset(exc) else f"error: {exc}")
    except httptools.HttpParserError as exc:
        result.ended = f"bad http: {exc}"
    finally:
        result.leaked = stream.scanner.found
        result.end_at = result.end_at or time.time()
        if writer is not None:
            writer.close()
        else:
            sock.close()
    return result


async def _read_slowly(stream: _Stream, sock: socket.socket) -> None:
    """512 bytes at a time straight from the socket, at the slow rate.

    No library buffer in between: one would take the kernel's whole receive buffer at once and
    then leave the socket alone for seconds, so the bytes would cross the wire in gulps far
    apart (a client that drains nothing for that long, as the gateway sees it).
    """
    loop = asyncio.get_running_loop()
    while data := await loop.sock_recv(sock, 512):
        stream.take(data)
        await asyncio.sleep(len(data) / stream.target.slow_bytes_per_s)
    stream.result.ended = "eof"


async def _read(
    stream: _Stream,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    sock: socket.socket,
) -> None:
    plan, result = stream.plan, stream.result
    kind = plan.kind.reader
    if kind == "disconnect" and plan.disconnect_after == -1:
        await asyncio.sleep(0.001 * (plan.index % 50))  # before or just after the headers
        _leave(stream, writer, sock)
        return
    stuck_from: int | None = 1 if kind == "stuck" else None
    while True:
        data = await reader.read(1 << 16)
        if not data:
            result.ended = "eof"
            return
        stream.take(data)
        if kind == "disconnect" and result.content_events >= (plan.disconnect_after or 0):
            if result.status is None or result.done:
                continue
            _leave(stream, writer, sock)
            return
        if stuck_from is not None and result.content_events >= stuck_from:
            # Stop reading: the gateway must notice, cut this client and free the upstream.
            stuck_from = None
            await asyncio.sleep(stream.target.stuck_hold_s)


def _leave(stream: _Stream, writer: asyncio.StreamWriter, sock: socket.socket) -> None:
    result = stream.result
    if stream.plan.abort:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    result.left_at = time.time()
    result.ended = "left"
    if stream.plan.abort:
        writer.transport.abort()
    else:
        writer.close()


def _is_reset(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError)
