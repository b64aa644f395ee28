"""Send: one streamed request over aiohttp, stamped on arrival, recorded as a timeline.

Fidelity comes first here. Each read is stamped with ``clock.now_ns()`` the moment
``readany()`` hands its bytes over, before any SSE decoding or JSON parsing, and every event
the read completed carries that stamp (:class:`StreamRecorder`). ``readany`` returns whatever
the socket has delivered, so an event is never held back waiting for a buffer to fill; the
read buffer (``read_bufsize``) is large enough that a burst of events never pauses the
socket.

Every way a request can go wrong becomes that stream's outcome, with a message a person can
act on; aiohttp's exceptions never leave this module:

- could not connect (refused, DNS, TLS, connect timeout): ``error``;
- HTTP 4xx/5xx: ``error``, with the status and the server's own message;
- a body that is not an event stream, malformed SSE or chunk JSON, an in-band error: ``error``;
- the connection lost mid-stream, or a body that ends without ``[DONE]``: ``truncated``;
- closed by us (``--cancel``): ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import NamedTuple

import aiohttp
import orjson

from steadystream._clock import Clock
from steadystream._exceptions import ProtocolError
from steadystream._transport_errors import TRANSPORT_ERRORS
from steadystream._types import Outcome, Where
from steadystream.bench.cancel import CancelPoint
from steadystream.bench.endpoint import USAGE_LEVELS, Endpoint
from steadystream.bench.workload import RequestSpec
from steadystream.protocol import SseEvent, SseItem, StreamRecorder, is_done, parse_chunk
from steadystream.timeline import Timeline

__all__ = ["READ_BUFSIZE", "Sent", "StreamClient", "open_session"]

READ_BUFSIZE = 1 << 20
"""Bytes aiohttp may buffer per response before it stops reading the socket."""

_ERROR_BODY_LIMIT = 4096  # of an HTTP error body, kept for the message
_REJECTS_OPTIONS = (400, 422)  # how servers say "unknown field" (stream_options)


class Sent(NamedTuple):
    """A recorded stream and the clock instant its request was sent."""

    timeline: Timeline
    sent_ns: int


def open_session(
    *,
    connect_timeout_s: float = 10.0,
    read_timeout_s: float | None = 120.0,
    resolver: aiohttp.abc.AbstractResolver | None = None,
) -> aiohttp.ClientSession:
    """A session tuned for many long streams: no connection limit, large read buffers."""
    connector = aiohttp.TCPConnector(
        limit=0, limit_per_host=0, ttl_dns_cache=300, resolver=resolver
    )
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
    )
    tracing = aiohttp.TraceConfig()
    tracing.on_request_chunk_sent.append(_on_body_sent)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,  # SSE is not compressed; never buffer a stream to inflate it
        trace_configs=[tracing],
    )


async def _on_body_sent(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    # aiohttp awaits this just before it writes the body to the socket (one write, together
    # with the headers), so the stamp is the send, not the moment the task got around to it.
    state = context.trace_request_ctx
    if isinstance(state, _State):
        state.body_sent()


class StreamClient:
    """Streams requests to one endpoint through a session the caller owns."""

    def __init__(
        self,
        endpoint: Endpoint,
        session: aiohttp.ClientSession,
        clock: Clock,
        *,
        keep_text: bool = False,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.session = session
        self.clock = clock
        self.keep_text = keep_text
        self.labels = {"model": endpoint.model, **(labels or {})}
        self.usage_level = endpoint.first_usage_level
        self.usage_downgrades: list[str] = []  # what the server refused, for the summary

    async def stream(
        self,
        spec: RequestSpec,
        request_id: str,
        *,
        cancel: CancelPoint | None = None,
        on_interrupt: Callable[[Sent], None] | None = None,
    ) -> Sent:
        """Send one request and record its stream; never raises for the server's failures.

        If the task is cancelled mid-stream (the run was interrupted), the stream recorded
        so far is handed to ``on_interrupt`` as ``cancelled`` before the cancellation goes on.
        """
        while True:
            level = self.usage_level
            sent = await self._attempt(spec, request_id, level, cancel, on_interrupt)
            timeline = sent.timeline
            # Step down the usage options only on a clean refusal at the start.
            refused = (
                timeline.meta.get("http_status") in _REJECTS_OPTIONS
                and self.endpoint.usage == "auto"
                and level > 0
                and len(timeline) == 0
            )
            if not refused:
                return sent
            if self.usage_level == level:
                self.usage_level = level - 1
                self.usage_downgrades.append(
                    f"the server refused usage level {USAGE_LEVELS[level]!r} "
                    f"({timeline.error}); asking for {USAGE_LEVELS[level - 1]!r}"
                )

    async def _attempt(
        self,
        spec: RequestSpec,
        request_id: str,
        level: int,
        cancel: CancelPoint | None,
        on_interrupt: Callable[[Sent], None] | None,
    ) -> Sent:
        endpoint, clock = self.endpoint, self.clock
        body = endpoint.body(spec, level)
        headers = endpoint.request_headers(request_id)
        state = _State(self, request_id, cancel, endpoint.max_tokens(spec))
        try:
            async with self.session.post(
                endpoint.url, data=body, headers=headers, trace_request_ctx=state
            ) as resp:
                state.response_headers(clock.now_ns(), resp.status)
                refusal = await _refusal(resp)
                if refusal is not None:
                    state.finish(clock.now_ns(), Outcome.ERROR, refusal)
                elif cancel is not None and cancel.after_ns is not None:
                    await self._read_until(resp, state, state.sent_ns + cancel.after_ns)
                else:
                    await self._read(resp, state)
        except asyncio.CancelledError:
            if state.timeline is None:
                state.finish(clock.now_ns(), Outcome.CANCELLED, "run interrupted mid-stream")
                if on_interrupt is not None:
                    on_interrupt(state.sent(level, spec))
            raise
        except TRANSPORT_ERRORS as exc:
            if state.timeline is None:
                outcome, message = _describe(
                    exc, recorder_started=state.reads > 0, endpoint=endpoint
                )
                state.finish(clock.now_ns(), outcome, message)
        if state.timeline is None:
            state.finish(clock.now_ns(), None, None)
        return state.sent(level, spec)

    async def _read(self, resp: aiohttp.ClientResponse, state: _State) -> None:
        clock, content = self.clock, resp.content
        recorder = state.start_recording()
        feed = recorder.feed
        counting = state.cancel is not None and state.cancel.after_tokens is not None
        while True:
            data = await content.readany()
            now = clock.now_ns()  # before any decoding: this is when the bytes were ours
            if not data:
                return
            state.reads += 1
            items = feed(now, data)
            if counting and state.count_tokens(items):
                resp.close()  # closes the connection: the server sees the client leave
                state.finish(now, Outcome.CANCELLED, state.cancel_reason())
                return
            if recorder.ended:
                # [DONE] or an error: nothing after it counts, and a server that keeps the
                # body open must not hold the slot until the read timeout.
                return

    async def _read_until(
        self, resp: aiohttp.ClientResponse, state: _State, deadline_ns: int
    ) -> None:
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(resp, state))
        timer = loop.create_task(self.clock.sleep_until(deadline_ns))
        try:
            await asyncio.wait({reader, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, timer):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        if reader.done() and not reader.cancelled():
            reader.result()  # the stream ended first: raise what it raised, if anything
            return
        resp.close()
        state.finish(self.clock.now_ns(), Outcome.CANCELLED, state.cancel_reason())


class _State:
    """One attempt: its instants, its recorder once the response began, and how it ended.

    It is also the attempt's aiohttp trace context: :func:`_on_body_sent` stamps the moment
    the request's bytes were handed to the socket, which is the request-sent instant every
    time in the timeline counts from. Time spent before it (connecting, waiting for the
    event loop) is the client's, not the server's; it is kept in ``meta["send_ms"]``.
    """

    __slots__ = (
        "begin_ns",
        "cancel",
        "chunks",
        "client",
        "max_tokens",
        "reads",
        "recorder",
        "request_id",
        "started_at",
        "status",
        "timeline",
        "wire_ns",
    )

    def __init__(
        self,
        client: StreamClient,
        request_id: str,
        cancel: CancelPoint | None,
        max_tokens: int | None,
    ) -> None:
        self.client = client
        self.request_id = request_id
        self.cancel = cancel
        self.max_tokens = max_tokens  # as sent: the token count of a stream cut for length
        self.started_at = time.time()
        self.begin_ns = client.clock.now_ns()
        self.wire_ns: int | None = None
        self.recorder: StreamRecorder | None = None
        self.status: int | None = None
        self.reads = 0
        self.chunks = 0  # content chunks seen, counted only for --cancel-after Ntok
        self.timeline: Timeline | None = None

    @property
    def sent_ns(self) -> int:
        return self.wire_ns if self.wire_ns is not None else self.begin_ns

    def body_sent(self) -> None:
        if self.wire_ns is None:
            self.wire_ns = self.client.clock.now_ns()

    def start_recording(self) -> StreamRecorder:
        if self.recorder is None:
            client = self.client
            self.recorder = StreamRecorder(
                self.request_id,
                Where.CLIENT,
                keep_text=client.keep_text,
                labels=client.labels,
                started_at=self.started_at,
                sent_ns=self.sent_ns,
                max_tokens=self.max_tokens,
            )
        return self.recorder

    def response_headers(self, now_ns: int, status: int) -> None:
        self.start_recording().headers(now_ns)
        self.status = status

    def finish(self, now_ns: int, outcome: Outcome | None, error: str | None) -> None:
        self.timeline = self.start_recording().finish(now_ns, outcome=outcome, error=error)

    def count_tokens(self, items: Sequence[SseItem]) -> bool:
        """Count content chunks among ``items``; True once the cancel point is reached."""
        for item in items:
            if isinstance(item, SseEvent) and item.event == "message" and not is_done(item.data):
                try:
                    chunk = parse_chunk(item.data)
                except ProtocolError:
                    continue
                if chunk.kind.carries_text and chunk.text:
                    self.chunks += 1
        limit = self.cancel.after_tokens if self.cancel is not None else None
        return limit is not None and self.chunks >= limit

    def cancel_reason(self) -> str:
        point = self.cancel.describe() if self.cancel is not None else "?"
        return f"cancelled by the client after {point} (--cancel-after)"

    def sent(self, level: int, spec: RequestSpec) -> Sent:
        assert self.timeline is not None
        meta = self.timeline.meta
        meta["send_ms"] = round((self.sent_ns - self.begin_ns) / 1e6, 3)
        meta["usage_requested"] = USAGE_LEVELS[level]
        meta["input_tokens_estimate"] = spec.input_tokens
        if spec.max_tokens is not None:
            meta["max_tokens"] = spec.max_tokens
        if self.status is not None:
            meta["http_status"] = self.status
        if self.cancel is not None:
            meta["cancel_after"] = self.cancel.describe()
        return Sent(self.timeline, self.sent_ns)


async def _refusal(resp: aiohttp.ClientResponse) -> str | None:
    """Why a response cannot be a stream (HTTP error, not an event stream), or None."""
    if resp.status >= 400:
        body = await resp.content.read(_ERROR_BODY_LIMIT)
        return f"HTTP {resp.status} {resp.reason or ''}".rstrip() + _server_message(body)
    content_type = resp.headers.get("Content-Type", "")
    if content_type.startswith("application/json"):
        body = await resp.content.read(_ERROR_BODY_LIMIT)
        return (
            "the server answered with JSON, not an event stream (does it support stream=true?)"
            + _server_message(body)
        )
    return None


def _server_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f": {text[:300]}" if text else ""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return f": {error['message'][:300]}"
    if isinstance(error, str):
        return f": {error[:300]}"
    if isinstance(payload, dict) and isinstance(payload.get("detail"), str):
        return f": {payload['detail'][:300]}"
    return f": {text[:300]}" if text else ""


def _describe(
    exc: BaseException, *, recorder_started: bool, endpoint: Endpoint
) -> tuple[Outcome, str]:
    """The outcome and a clear message for a transport failure."""
    where = endpoint.origin
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or (
        isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, socket.gaierror)
    ):
        return Outcome.ERROR, f"DNS failure: cannot resolve the host of {where}"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return Outcome.ERROR, f"TLS failure talking to {where}: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        # asyncio words a refusal "Connect call failed (...)"; the errno says what happened.
        reason = os.strerror(error.errno) if error.errno else (error.strerror or str(error))
        return Outcome.ERROR, f"cannot connect to {where}: {reason}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return Outcome.ERROR, f"cannot connect to {where}: connect timed out"
    if isinstance(exc, TimeoutError):
        return Outcome.ERROR if not recorder_started else Outcome.TRUNCATED, (
            "read timed out: no bytes within the read timeout"
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError) and not recorder_started:
        return Outcome.ERROR, "the server closed the connection without answering"
    detail = str(exc) or exc.__class__.__name__
    if recorder_started:
        return Outcome.TRUNCATED, f"connection lost mid-stream: {detail}"
    return Outcome.ERROR, f"request failed: {detail}"
