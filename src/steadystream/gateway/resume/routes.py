"""The ways back into a stream (docs/gateway.md#resume).

- ``GET /v1/streams/{stream_id}`` with ``Last-Event-ID: N`` (none: from the start): every
  event after ``N``, then the live ones; ``DELETE /v1/streams/{stream_id}``: cancel now.
- The generation ``POST`` again with the same ``Idempotency-Key`` (:func:`join`): the stream
  in flight, not a second generation; with ``Last-Event-ID`` only what came after.
- The Responses API's own: ``GET /v1/responses/{id}?stream=true&starting_after=N`` (``N`` a
  ``sequence_number``; with ``Last-Event-ID`` too, the later of the two) and
  ``POST /v1/responses/{id}/cancel``.

Events that are not kept (expired, past a bound, evicted, an unknown id) get a 410 whose
JSON error names the reason, in the route's API error shape: never a silent partial. A
stream belongs to its tenant: another tenant's id is as unknown as a made-up one. A replay
cut short, or of a stream the gateway cut, ends with an SSE error event in the stream's own
API shape (Messages' and the Responses API's ``error`` events, chat's error object).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from steadystream._api_errors import ApiError, ErrorShape, json_response
from steadystream.gateway.auth import gateway_key
from steadystream.gateway.disconnect import run_until_disconnect
from steadystream.gateway.events import (
    KEEPALIVE,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_WRITE_S,
    SSE_HEADERS,
    ChunkFormat,
    encode_event,
)
from steadystream.gateway.requests import error_shape, new_request_id
from steadystream.gateway.resume.hub import CANCELLED_ENDS, RESPONSE_ID, STREAM_ID_HEADER, StreamHub
from steadystream.gateway.resume.log import StreamGone
from steadystream.gateway.resume.sequence import (
    check_sequence,
    events_after,
    last_sequence,
    last_sequence_of,
    past_sequence,
)
from steadystream.gateway.resume.store import StreamInfo
from steadystream.gateway.resume.stuck import StuckReader
from steadystream.gateway.state import GatewayState
from steadystream.gateway.translation.responses import error_event
from steadystream.gateway.writers import unsent_bytes
from steadystream.protocol import error_payload

__all__ = [
    "LAST_EVENT_ID",
    "join",
    "last_event_id",
    "last_event_id_of",
    "resume_routes",
    "serve_replay",
]

T = TypeVar("T")

LAST_EVENT_ID = "last-event-id"
# How long a stream a shared store does not know yet is looked for: its first writes go in a
# batch (50 ms, then a quiet moment of its loop, 75 ms at most), and a loaded gateway's
# batch can take a second more; as long as a reader may be ahead of Redis (redis_store's
# _AHEAD_NS).
_JOIN_WAIT_NS = 2_000_000_000
_JOIN_POLL_NS = 100_000_000
_SAFE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# What the gateway names streams (hub.new_id); anything else (as a response id other than
# hub.RESPONSE_ID) is no stream of this gateway, and never reaches a store.
_STREAM_ID = re.compile(r"strm_[A-Za-z0-9_-]{1,64}")


def last_event_id(value: str | None, name: str = "Last-Event-ID") -> int:
    """The event a reader saw last (0: none); 400 naming ``name`` when it is no number."""
    if value is None or value == "":
        return 0
    value = value.strip()
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        # (ASCII: "²" is a digit to str.isdigit, and no number to int)
        raise ApiError(
            400,
            f"{name}: {_shown(value)} is not an event id of this gateway (a decimal number)",
            param=name,
        )
    return int(value)


def last_event_id_of(headers: Headers) -> int:
    """The request's ``Last-Event-ID`` (:func:`last_event_id`). Sent more than once with
    different values it is a 400: either guess would give events twice or lose some."""
    values = headers.getlist(LAST_EVENT_ID)
    if len(set(values)) > 1:
        raise ApiError(
            400,
            f"Last-Event-ID: sent {len(values)} times with different values; send the id of"
            " the last event read, once",
            param="Last-Event-ID",
        )
    return last_event_id(values[0] if values else None)


def _shown(value: str) -> str:
    """``value`` as an error may quote it: short, and only in a safe alphabet."""
    if _SAFE.fullmatch(value):
        return repr(value)
    return f"a value of {len(value)} characters"


def gone(error: StreamGone, stream_id: str) -> ApiError:
    """The 410 of a stream whose events are not kept, naming why."""
    return ApiError(
        410,
        f"stream {_shown(stream_id)} cannot be resumed ({error.reason}): {error.message}",
        code=f"stream_{error.reason}",
    )


def _unknown(stream_id: str) -> StreamGone:
    return StreamGone("unknown", f"no stream {_shown(stream_id)} is kept for this caller")


def _tenant(state: GatewayState, request: Request) -> str:
    """The caller's tenant (401 when the key is no gateway key)."""
    return state.auth.tenant_for(gateway_key(request.headers, request.url.path)).name


async def _find(
    state: GatewayState, hub: StreamHub, tenant: str, stream_id: str, asked: str | None = None
) -> StreamInfo:
    """The caller's stream ``stream_id``; 410 (unknown) when there is none of theirs. The
    error quotes ``asked``, the name the caller used (default ``stream_id``): never a name
    the caller did not send (another tenant's stream id is a secret of theirs)."""
    asked = stream_id if asked is None else asked
    if not _STREAM_ID.fullmatch(stream_id):
        raise gone(_unknown(asked), asked)
    info = await _info_soon(state, hub, stream_id)
    if info is None or info.tenant != tenant:
        raise gone(_unknown(asked), asked)
    return info


async def serve_replay(
    state: GatewayState,
    hub: StreamHub,
    info: StreamInfo,
    after: int,
    how: str,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    after_sequence: int | None = None,
    asked: str | None = None,
) -> None:
    """Send stream ``info``'s events after event ``after`` (for the Responses API, only
    those after ``sequence_number`` ``after_sequence`` too), then the live ones, until it
    ends. A 410 quotes ``asked``, the name the caller used (default the stream's id)."""
    shape = _shape_of(info)
    limits = state.config.limits
    stream_id = info.stream_id
    asked = stream_id if asked is None else asked
    try:
        source = hub.store_of(stream_id).follow(stream_id, after, limits.keepalive_interval)
        ready = await anext(source, None)  # b"": found, and the events after ``after`` kept
        events = source
        if after_sequence is not None:
            log = hub.local.log(stream_id)
            if log is not None:  # (it has every event its readers got, running or not)
                check_sequence(last_sequence_of(log.events, after), after, after_sequence)
            else:  # (a shared store's: read until it is reached, or the end, to look)
                wait_ns = None if info.ended is not None else _JOIN_WAIT_NS
                events = await past_sequence(source, after, after_sequence, state.clock, wait_ns)
    except StreamGone as exc:
        await gone(exc, asked).response(shape=shape)(scope, receive, send)
        return
    except ApiError as exc:
        await exc.response(shape=shape)(scope, receive, send)
        return
    assert ready == b"" or ready is None
    live = hub.live.get(stream_id)
    if live is not None:
        live.reader_came()
    state.metrics.resumes.labels(info.route, how).inc()
    done = started = over = False  # (over: every event of the stream went out)
    # The Responses API's error event is numbered on from the last event the reader has
    # (its sequence_number; event N of a stream is sequence_number N - 1).
    sequence = max(after - 1, -1 if after_sequence is None else after_sequence)
    link = None if state.client_link is None else state.client_link(scope, send)
    transport = None if link is None else link.transport
    stuck = StuckReader(state.clock, limits.stuck_timeout, lambda: unsent_bytes(transport))

    def answered() -> bool:
        return done

    async def write(body: bytes, more: bool = True) -> None:
        stuck.sending()
        await send({"type": "http.response.body", "body": body, "more_body": more})
        stuck.sent()

    async def work() -> None:
        nonlocal done, started, over, sequence
        stuck.watch()
        headers = [
            *SSE_HEADERS,
            (b"x-request-id", new_request_id().encode()),
            (STREAM_ID_HEADER.lower().encode(), stream_id.encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        started = True
        replayed = True  # the first events are the ones kept before the reader came
        skip = after_sequence
        numbered = info.route == "responses"
        try:
            async for chunk in events:
                if chunk is None:
                    body = KEEPALIVE
                    replayed = False
                else:
                    if numbered:
                        sequence = max(sequence, last_sequence(chunk))
                    if skip is not None:
                        chunk = events_after(chunk, skip)
                    if replayed:
                        state.metrics.resume_events_replayed.labels(info.route).inc(
                            chunk.count(b"\nid: ")
                        )
                        replayed = False
                    body = chunk
                if body:
                    await write(body)
        except StreamGone as exc:  # dropped while it was read: say so, in the stream
            over = True
            await write(_in_band_gone(exc, info.route, sequence + 1))
        else:
            over = True
            # A stream the gateway cut (DELETE, the grace, a stuck client) has no end of its
            # own in its events: without a word the reader would take the partial for whole.
            ended = await hub.info(stream_id)
            why = None if ended is None else CANCELLED_ENDS.get(ended.ended or "")
            if why is not None:
                message = f"the stream was cancelled: {why}"
                await write(_in_band_error(message, "stream_cancelled", info.route, sequence + 1))
        done = True
        await write(b"", more=False)

    task = asyncio.current_task()
    if task is not None:  # (the app's shutdown waits for it to end in-band: app.py)
        state.requests.add(task)
    try:
        try:
            await run_until_disconnect(work(), receive, state.clock, answered=answered)
        except asyncio.CancelledError:
            # The server is shutting down: the reader is told so in-band, as the stream's
            # own client is (relay.py), not cut short with no word.
            if done or not started or not state.shutting_down():
                raise
            done = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SHUTDOWN_WRITE_S):  # (a reader who reads nothing)
                    if not over:  # (else its own end went out, the producer's error too)
                        route, number = info.route, sequence + 1
                        await write(
                            _in_band_error(SHUTDOWN_MESSAGE, "gateway_shutdown", route, number)
                        )
                    await write(b"", more=False)
            if task is not None:
                task.uncancel()  # ended here: no traceback of a cancel in the server's log
        if stuck.cut:
            state.log.info("stream %s: a resumed reader read nothing; cut", stream_id)
            if transport is not None and not transport.is_closing():
                # (closed, the server would first flush what the reader does not read);
                # and the server sees it go before this returns, as the relay's cut does
                transport.abort()
                for _ in range(3):
                    await asyncio.sleep(0)
    finally:
        if task is not None:
            state.requests.discard(task)
        stuck.stop()
        await _close(source)
        if live is not None and not live.reader_left() and live.running:
            live.stop()


async def _close(events: AsyncIterator[bytes | None]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


def _in_band_gone(error: StreamGone, route: str, sequence: int) -> bytes:
    """A reader cut off mid-replay learns why in an SSE error event it reads."""
    message = f"the stream cannot be resumed further ({error.reason}): {error.message}"
    return _in_band_error(message, f"stream_{error.reason}", route, sequence)


def _in_band_error(message: str, code: str, route: str, sequence: int) -> bytes:
    """An SSE ``error`` event in the route's own shape, as the relay writes one (no ``id:``:
    it is no event of the stream): Messages' (gateway/events.py), the Responses API's
    ``type: "error"`` with the next ``sequence`` (translation/responses.py), else OpenAI's
    error object (no ``[DONE]`` after it: a partial must not read as whole)."""
    if route == "messages":
        return ChunkFormat.error(message, code, route)
    if route == "responses":
        return error_event(message, code, sequence)
    return encode_event(error_payload(message, code=code), "error")


async def join(
    state: GatewayState,
    hub: StreamHub,
    stream_id: str,
    request: Request,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """A repeated ``POST`` (same ``Idempotency-Key``) joins its stream in flight.

    The key is bound before the stream's first write reaches a shared store (the writes go
    in batches): a stream the key names but the store does not know yet is looked for again
    (:func:`_info_soon`)."""
    shape = error_shape(request.url.path)
    try:
        after = last_event_id_of(request.headers)
    except ApiError as exc:  # (a 400 here, not an exception up to the POST's route: a 500)
        await exc.response(shape=shape)(scope, receive, send)
        return
    info = await _info_soon(state, hub, stream_id)
    if info is None:
        await gone(_unknown(stream_id), stream_id).response(shape=shape)(scope, receive, send)
        return
    await serve_replay(state, hub, info, after, "idempotency", scope, receive, send)


async def _info_soon(state: GatewayState, hub: StreamHub, stream_id: str) -> StreamInfo | None:
    """The stream, looked for again for up to two seconds while the shared store does not
    know it: its first writes go in a batch, after its first events reached their client
    (who may come back through another replica at once)."""
    return await _soon(state, hub, lambda: hub.info(stream_id))


async def _soon(
    state: GatewayState, hub: StreamHub, look: Callable[[], Awaitable[T | None]]
) -> T | None:
    """``look()``, again for up to two seconds while it finds nothing and a shared store
    may not have the stream's first batch yet (:func:`_info_soon`)."""
    found = await look()
    if found is not None or hub.shared is None:
        return found
    clock = state.clock
    deadline = clock.now_ns() + _JOIN_WAIT_NS
    while (found := await look()) is None and clock.now_ns() < deadline:
        await clock.sleep_until(clock.now_ns() + _JOIN_POLL_NS)
    return found


class _Streams:
    """``GET`` and ``DELETE /v1/streams/{stream_id}``."""

    def __init__(self, state: GatewayState, hub: StreamHub) -> None:
        self.state = state
        self.hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        stream_id = request.path_params["stream_id"]
        shape = error_shape("/v1")  # (the stream's route's, once it is found)
        if request.method == "HEAD":
            await _no_head("/v1/streams/{stream_id}", "GET, DELETE")(scope, receive, send)
            return
        try:
            tenant = _tenant(self.state, request)
            info = await _find(self.state, self.hub, tenant, stream_id)
            shape = _shape_of(info)
            if request.method == "DELETE":
                response = await _cancel(self.hub, info)
            else:
                after = last_event_id_of(request.headers)
                await serve_replay(
                    self.state, self.hub, info, after, "stream", scope, receive, send
                )
                return
        except ApiError as exc:
            response = exc.response(shape=shape)
        await response(scope, receive, send)


class _Responses:
    """``GET /v1/responses/{id}?stream=true&starting_after=N`` and ``POST .../cancel``."""

    def __init__(self, state: GatewayState, hub: StreamHub) -> None:
        self.state = state
        self.hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response_id = request.path_params["response_id"]
        if request.method == "HEAD":
            await _no_head("/v1/responses/{response_id}", "GET")(scope, receive, send)
            return
        try:
            tenant = _tenant(self.state, request)
            if not RESPONSE_ID.fullmatch(response_id):
                raise gone(_unknown(response_id), response_id)
            hub = self.hub
            stream_id = await _soon(
                self.state, hub, lambda: hub.stream_of_response(tenant, response_id)
            )
            if stream_id is None:
                raise gone(_unknown(response_id), response_id)
            info = await _find(self.state, self.hub, tenant, stream_id, response_id)
            if request.method == "POST":  # (answered with the id the caller knows)
                response = await _cancel(self.hub, info, response_id, "response")
            else:
                if request.query_params.get("stream") != "true":
                    raise ApiError(
                        400,
                        "stream: the gateway serves a response again only as its stream"
                        " (stream=true)",
                        param="stream",
                    )
                sequences = request.query_params.getlist("starting_after")
                if len(set(sequences)) > 1:  # (either guess gives events twice or loses some)
                    raise ApiError(
                        400,
                        f"starting_after: given {len(sequences)} times with different values;"
                        " give it once",
                        param="starting_after",
                    )
                sequence = sequences[0] if sequences else None
                after_sequence = None
                if sequence == "":  # (not 0: that is a number, response.created's)
                    raise ApiError(
                        400,
                        "starting_after: empty; a sequence_number, or leave it out for the"
                        " whole stream",
                        param="starting_after",
                    )
                if sequence is not None:
                    after_sequence = last_event_id(sequence, "starting_after")
                # An EventSource that reconnects sends the URL it began with (its
                # starting_after) and the id it read last: the later of the two holds.
                after = last_event_id_of(request.headers)
                await serve_replay(
                    self.state, self.hub, info, after, "responses", scope, receive, send,
                    after_sequence=after_sequence, asked=response_id,
                )  # fmt: skip
                return
        except ApiError as exc:
            response = exc.response()
        await response(scope, receive, send)


def _no_head(route: str, allow: str) -> Response:
    """405 to a ``HEAD`` (which the router lets through with ``GET``): a resume is a reader,
    and a reader that never reads would hold its stream's generation past the grace."""
    error = ApiError(
        405,
        f"HEAD is not allowed on {route}: a resume reads the stream (GET)",
        code="method_not_allowed",
    )
    return error.response({"Allow": allow})


def _shape_of(info: StreamInfo) -> ErrorShape:
    """The error shape the clients of ``info``'s route read."""
    return error_shape("/v1/messages" if info.route == "messages" else "/v1")


async def _cancel(
    hub: StreamHub, info: StreamInfo, asked: str | None = None, kind: str = "stream"
) -> Response:
    """Cancel the stream's generation; the answer names it as the caller did (``asked``:
    a response's id, an object ``kind`` of its API)."""
    stream_id = info.stream_id
    live = hub.live.get(stream_id)
    if live is not None:
        cancelled = live.stop()
    else:
        cancelled = info.ended is None and await hub.cancel_elsewhere(stream_id)
    name = stream_id if asked is None else asked
    return json_response({"id": name, "object": kind, "cancelled": cancelled})


def resume_routes(state: GatewayState, hub: StreamHub) -> list[Route]:
    """The routes above, for the gateway's app."""
    streams = _Streams(state, hub)
    responses = _Responses(state, hub)
    return [
        Route("/v1/streams/{stream_id}", streams, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}", responses, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", responses, methods=["POST"]),
    ]
