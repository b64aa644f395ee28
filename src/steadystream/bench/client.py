"""Send: one streamed request, stamped on arrival, recorded as a timeline.

Fidelity comes first here. The stream is read by :class:`StampedConnection`, whose every read
carries its arrival stamp: the kernel's receive stamp (``meta.stamps = "kernel"``), or the
clock read when the event loop got to the bytes (``"user"``). Each read goes to the
:class:`StreamRecorder` with that stamp before any other work, and every event the read
completed carries it. The stamp is the moment the event's last byte reached this host, not
the moment the loop got round to it (docs/bench.md, "How arrivals are stamped").

Every way a request can go wrong becomes that stream's outcome, with a message a person can
act on:

- could not connect (refused, DNS, TLS, connect timeout): ``error``;
- HTTP 4xx/5xx: ``error``, with the status and the server's own message;
- a body that is not an event stream, malformed SSE or chunk JSON, an in-band error: ``error``;
- the connection lost mid-stream, or a body that ends without ``[DONE]``: ``truncated``;
- closed by us (``--cancel``): ``cancelled``.

aiohttp stays for the calls that need no stamps (lab ground truth, health checks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson

from steadystream._clock import NS_PER_MS, NS_PER_S, Clock
from steadystream._exceptions import (
    ProtocolError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamStreamError,
)
from steadystream._types import Outcome
from steadystream.bench.attempt import AttemptState, Sent
from steadystream.bench.cancel import CancelPoint
from steadystream.bench.disconnect import (
    STREAM_ID_HEADER,
    DisconnectPlan,
    EventIds,
    Reconnect,
    id_problem,
    resume_headers,
    resume_path,
)
from steadystream.bench.endpoint import USAGE_LEVELS, Endpoint
from steadystream.bench.workload import RequestSpec
from steadystream.stamped import (
    ResponseHead,
    StampedConnection,
    StampMode,
    Target,
    connection_type,
)
from steadystream.stamped.target import Resolve

__all__ = ["Sent", "StreamClient", "open_session", "resolve_with"]

_ERROR_BODY_LIMIT = 4096  # of an HTTP error body, kept for the message
_REJECTS_OPTIONS = (400, 422)  # how servers say "unknown field" (stream_options)


def open_session(*, connect_timeout_s: float = 10.0) -> aiohttp.ClientSession:
    """The session for calls that need no stamps (ground truth, health): small JSON bodies."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=30.0)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)


def resolve_with(resolver: aiohttp.abc.AbstractResolver) -> Resolve:
    """A stream connection's resolver from an aiohttp one (``Bench(resolver=...)``)."""

    async def resolve(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
        answers = await resolver.resolve(host, port)
        return [(answer["family"], (answer["host"], answer["port"])) for answer in answers]

    return resolve


class StreamClient:
    """Streams requests to one endpoint, one stamped connection per request."""

    def __init__(
        self,
        endpoint: Endpoint,
        clock: Clock,
        *,
        stamps: StampMode = StampMode.USER,
        keep_text: bool = False,
        labels: Mapping[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float | None = 120.0,
        finish_timeout_s: float | None = 5.0,
        resolve: Resolve | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.target = Target.from_url(endpoint.url)
        self.clock = clock
        self.stamps = stamps
        self.keep_text = keep_text
        self.labels = {"model": endpoint.model, **(labels or {})}
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        # After a finish reason, the longest silence before the client closes the body (a
        # server that never sends its end would hold the slot until the read timeout).
        self.finish_timeout_ns = (
            None if finish_timeout_s is None else max(1, round(finish_timeout_s * NS_PER_S))
        )
        self.resolve = resolve
        self.usage_level = endpoint.first_usage_level
        scrubber = endpoint.scrubber()
        self.scrub = None if scrubber is None else scrubber.text
        self.usage_downgrades: list[str] = []  # what the server refused, for the summary

    async def reach(self) -> None:
        """Connect once and close, sending nothing; raises :class:`UpstreamConnectError` (the
        same words as a stream's error, and what to check) when the server is not there.

        A run against a port nothing listens on would otherwise record every stream as an
        error, one after another as fast as they fail, and only then say why.
        """
        try:
            conn = await connection_type().open(
                self.target,
                self.clock,
                StampMode.USER,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=None,
                resolve=self.resolve,
            )
        except UpstreamConnectError as exc:
            raise UpstreamConnectError(f"{exc}; is a server running at that address?") from exc
        conn.close()

    async def stream(
        self,
        spec: RequestSpec,
        request_id: str,
        *,
        cancel: CancelPoint | None = None,
        disconnect: DisconnectPlan | None = None,
        on_interrupt: Callable[[Sent], None] | None = None,
    ) -> Sent:
        """Send one request and record its stream; never raises for the server's failures.

        ``disconnect``: drop the connection at that point and come back for the rest
        (bench/disconnect.py); the stream's reconnects go into its ``meta``.

        If the task is cancelled mid-stream (the run was interrupted), the stream recorded
        so far is handed to ``on_interrupt`` as ``cancelled`` before the cancellation goes on.
        """
        while True:
            level = self.usage_level
            sent = await self._attempt(spec, request_id, level, cancel, disconnect, on_interrupt)
            timeline = sent.timeline
            # Step down the usage options only on a clean refusal at the start.
            refused = (
                timeline.meta.get("http_status") in _REJECTS_OPTIONS
                and self.endpoint.usage == "auto"
                and self.endpoint.steps_down
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
        disconnect: DisconnectPlan | None,
        on_interrupt: Callable[[Sent], None] | None,
    ) -> Sent:
        endpoint, clock = self.endpoint, self.clock
        body = endpoint.body(spec, level)
        headers = endpoint.request_headers(request_id)
        state = AttemptState(
            request_id,
            cancel,
            endpoint.max_tokens(spec),
            clock=clock,
            stamps=self.stamps,
            keep_text=self.keep_text,
            labels=self.labels,
            api=endpoint.kind,
            scrub=self.scrub,
        )
        if disconnect is not None:
            state.ids = EventIds()
        conn: StampedConnection | None = None
        try:
            conn = await connection_type().open(
                self.target,
                clock,
                self.stamps,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
                resolve=self.resolve,
            )
            state.wire_ns = await conn.send("POST", headers, body)
            head = await conn.head()
            state.response_headers(head.header_ns, head.status)
            refusal = await _refusal(conn, head, endpoint)
            if refusal is not None:
                state.finish(clock.now_ns(), Outcome.ERROR, refusal)
            elif disconnect is not None:
                await self._drop_and_return(conn, state, disconnect, head, headers)
            elif cancel is not None and cancel.after_ns is not None:
                closed = await self._read_until(conn, state, state.sent_ns + cancel.after_ns)
                if closed is not None:
                    state.finish(closed, Outcome.CANCELLED, state.cancel_reason())
            else:
                state.end_ns = await self._read(conn, state)
        except asyncio.CancelledError:
            if state.timeline is None:
                state.finish(clock.now_ns(), Outcome.CANCELLED, "run interrupted mid-stream")
                if on_interrupt is not None:
                    sent = state.sent(level, spec)
                    if disconnect is not None:
                        _interrupted(sent, disconnect, state)
                    on_interrupt(sent)
            raise
        except (UpstreamError, ProtocolError) as exc:
            if state.timeline is None:
                outcome, message = _describe(exc, recorder_started=state.reads > 0)
                state.finish(clock.now_ns(), outcome, message)
        finally:
            if conn is not None:
                state.clock_step_ns = conn.clock_step_ns()
                conn.close()
        if state.timeline is None:
            state.finish(state.end_ns if state.end_ns is not None else clock.now_ns(), None, None)
        sent = state.sent(level, spec)
        if disconnect is not None:
            # Chosen for a drop: one that ended before its drop point has no reconnect, and
            # without this nothing would say it was meant to drop.
            sent.timeline.meta["disconnect"] = disconnect.describe()
        return sent

    async def _read(
        self, conn: StampedConnection, state: AttemptState, *, drop_after: int | None = None
    ) -> int:
        """Read the body to its end; with ``drop_after`` (content chunks), stop there and
        set ``state.dropped`` instead (the reader leaves, to come back)."""
        recorder = state.start_recording()
        feed, decoder = recorder.feed, recorder.decoder
        cancel_after = state.cancel.after_tokens if state.cancel is not None else None
        limit = drop_after if drop_after is not None else cancel_after
        ids, returned = state.ids, state.returned
        most, seen = most_events(state.max_tokens), 0
        clock, finish_timeout_ns = self.clock, self.finish_timeout_ns
        watch: list[asyncio.Task[None]] = []  # the wait for the end after a finish reason

        def sink(stamp: int, data: bytes) -> bool:
            nonlocal seen
            state.reads += 1
            items = feed(stamp, data)
            if decoder.undispatched_bytes > MAX_EVENT_BYTES:  # (an event that never ends)
                state.finish(self.clock.now_ns(), Outcome.ERROR, _endless_event())
                return True
            if items:
                seen += len(items)
                if seen > most:  # (a server that ignores max_tokens and never ends)
                    state.finish(self.clock.now_ns(), Outcome.ERROR, _overrun(most, state))
                    return True
                state.note_stamp(stamp, len(items))
                if ids is not None:
                    ids.see(items)
                if returned is not None:
                    if returned.first_ns is None:
                        returned.first_ns = stamp - state.sent_ns
                    returned.replayed += len(items)
            if limit is not None and state.count_tokens(items, limit):
                # Stopping closes the connection: the server sees the client leave now.
                if drop_after is not None:
                    # (a stream that ended in this read leaves nothing to come back for)
                    state.dropped = not recorder.ended
                else:
                    state.finish(self.clock.now_ns(), Outcome.CANCELLED, state.cancel_reason())
                return True
            # [DONE] or an error: nothing after it counts, and a server that keeps the
            # body open must not hold the slot until the read timeout.
            if recorder.ended:
                return True
            if recorder.finished and finish_timeout_ns is not None:
                # The answer is whole: its end should follow at once. Each read waits anew
                # (n > 1: other choices may still be streaming; a usage chunk follows too).
                if watch:
                    watch.pop().cancel()
                watch.append(asyncio.ensure_future(_end_missing(conn, state, clock.now_ns())))
            return False

        async def _end_missing(conn: StampedConnection, state: AttemptState, read: int) -> None:
            """Close a body held open with no end for the finish timeout after ``read``."""
            assert finish_timeout_ns is not None
            await clock.sleep_until(read + finish_timeout_ns)
            state.end_missing_ms = round((clock.now_ns() - read) / NS_PER_MS, 3)
            conn.close()

        try:
            return await conn.stream_body(sink)
        except UpstreamStreamError:
            if state.end_missing_ms is None:
                raise
            # (The client closed it: the answer was whole, its end never came.)
            return clock.now_ns()
        finally:
            for task in watch:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def _drop_and_return(
        self,
        conn: StampedConnection,
        state: AttemptState,
        plan: DisconnectPlan,
        head: ResponseHead,
        headers: dict[str, str],
    ) -> None:
        """Read to the drop point, close, wait ``back``, and read the rest of the stream
        from ``GET /v1/streams/{id}`` with ``Last-Event-ID`` over a new connection."""
        # (an empty name names no stream: the path would be the streams' own)
        stream_id = head.headers.get(STREAM_ID_HEADER, "").strip() or None
        clock = self.clock
        if plan.after.after_tokens is not None:
            state.end_ns = await self._read(conn, state, drop_after=plan.after.after_tokens)
            if not state.dropped:
                return  # it ended first
            dropped = clock.now_ns()  # (the sink's stop has closed the connection)
        else:
            closed = await self._read_until(conn, state, state.sent_ns + (plan.after.after_ns or 0))
            if closed is None:
                return
            dropped = closed
        ids = state.ids
        assert ids is not None
        # (an empty id is none: SSE sends no Last-Event-ID then, and asks from the start)
        last_id = ids.last or None
        reconnect = Reconnect(dropped - state.sent_ns, last_id)
        state.reconnects.append(reconnect)
        if stream_id is None:
            reconnect.error = (
                f"the response named no stream ({STREAM_ID_HEADER}): --disconnect needs a"
                " server that keeps streams, a steadystream gateway with resume on"
            )
        else:
            reconnect.error = id_problem(
                stream_id, f"the stream's name ({STREAM_ID_HEADER})", header=False
            )
        if reconnect.error is None and last_id is not None:
            problem = id_problem(last_id, "the last event's id")
            if problem is not None:
                reconnect.error = f"{problem}: it cannot be sent back as Last-Event-ID"
        if reconnect.error is not None or stream_id is None:
            state.finish(dropped, Outcome.ERROR, reconnect.error)
            return
        await clock.sleep_until(dropped + plan.back_ns)
        lost, doubled = ids.lost, ids.doubled
        target = self.target._replace(
            path=resume_path(self.target.path, self.endpoint.path, stream_id)
        )
        again: StampedConnection | None = None
        try:
            again = await connection_type().open(
                target,
                clock,
                self.stamps,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
                resolve=self.resolve,
            )
            reconnect.asked_ns = await again.send("GET", resume_headers(headers, last_id))
            reconnect.asked_ns -= state.sent_ns
            head = await again.head()
            reconnect.status = head.status
            refusal = await _refusal(again, head, self.endpoint)
            named = head.headers.get(STREAM_ID_HEADER)
            if refusal is None and named is not None and named.strip() != stream_id:
                # (its events' ids are another stream's numbers: a jump would read as losses)
                refusal = f"the answer named another stream ({STREAM_ID_HEADER})"
            if refusal is not None:
                reconnect.error = refusal
                state.finish(
                    clock.now_ns(), Outcome.ERROR, f"the stream was not resumed: {refusal}"
                )
                return
            state.start_recording().reconnected()
            ids.reconnected()
            state.returned = reconnect
            numbered, seen = ids.numbered, ids.seen
            state.end_ns = await self._read(again, state)
            if numbered and reconnect.replayed and ids.seen == seen:
                reconnect.error = (
                    "the return's events carry no ids: what it lost or doubled cannot be told"
                )
            # A return that brings the events kept and then an error (a stream the gateway
            # cut while no one read) is no clean reconnect: its entry says why. (One the
            # client closed, past the events a stream is read for, is finished already.)
            if state.timeline is None:
                state.finish(state.end_ns, None, None)
            assert state.timeline is not None
            if state.timeline.outcome is not Outcome.COMPLETE:
                reconnect.error = f"the stream after the return: {state.timeline.error}"
        except (UpstreamError, ProtocolError) as exc:
            reconnect.error = str(exc)
            raise
        finally:
            # (an event lost before the drop that the return brought late is no loss of the
            # return's, and no count is below none)
            reconnect.lost = max(ids.lost - lost, 0)
            reconnect.doubled = ids.doubled - doubled
            if again is not None:
                again.close()

    async def _read_until(
        self, conn: StampedConnection, state: AttemptState, deadline_ns: int
    ) -> int | None:
        """Read until the body ends (None) or ``deadline_ns``; then close the connection and
        return the instant just before it closed."""
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read(conn, state))
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
            state.end_ns = reader.result()  # the stream ended first: raise what it raised
            return None
        closed = self.clock.now_ns()  # stamped before the close the server will notice
        conn.close()
        return closed


def _interrupted(sent: Sent, plan: DisconnectPlan, state: AttemptState) -> None:
    """A stream chosen for a drop that the run's end cut short: its plan, and a return it
    never made (or never finished reading) marked so, not judged as one that failed."""
    meta = sent.timeline.meta
    meta["disconnect"] = plan.describe()
    if state.reconnects and state.reconnects[-1].first_ns is None:
        state.reconnects[-1].interrupted = True
        meta["reconnects"] = [reconnect.as_meta() for reconnect in state.reconnects]


async def _refusal(conn: StampedConnection, head: ResponseHead, endpoint: Endpoint) -> str | None:
    """Why a response cannot be a stream (HTTP error, redirect, not an event stream), or None."""
    if 300 <= head.status < 400:
        # Not followed: the body of a redirect is no answer to the request, whatever it holds.
        # (Where it points is not said: a server may put a credential in it.)
        await conn.read_body(_ERROR_BODY_LIMIT)
        return (
            f"HTTP {head.status} {head.reason}".rstrip()
            + ": a redirect, which bench does not follow; give the URL it points to"
        )
    if head.status >= 400:
        body = await conn.read_body(_ERROR_BODY_LIMIT)
        message = f"HTTP {head.status} {head.reason}".rstrip() + _server_message(body)
        likelier = endpoint.likelier_base() if head.status == 404 else None
        if likelier is not None:
            # The commonest first mistake: the server's root given where its API base goes.
            message += (
                f"; did you mean {likelier}? The URL is the API base, to which bench adds"
                f" /{endpoint.path}"
            )
        return message
    media = head.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media == "application/json":
        body = await conn.read_body(_ERROR_BODY_LIMIT)
        return (
            "the server answered with JSON, not an event stream (does it support stream=true?)"
            + _server_message(body)
        )
    if media in ("text/html", "application/xhtml+xml"):
        # A web page where an API was expected: a login page, a proxy's, a server's root.
        return (
            f"the server answered with a web page ({media}), not an event stream: is the URL"
            " the API's base (such as http://host:8000/v1)?"
        )
    return None


MOST_EVENTS = 10_000_000
"""Events of one stream read at most when the request names no ``max_tokens``."""


def most_events(max_tokens: int | None) -> int:
    """How many events a stream is read for: four an asked-for token and a thousand more
    (role, usage, a dialect's own events, keepalives), else :data:`MOST_EVENTS`. Past it the
    stream is closed as an error: a run of ``--requests`` with no ``--duration`` would
    otherwise wait for a server that never ends a stream."""
    return MOST_EVENTS if max_tokens is None else 4 * max_tokens + 1_000


MAX_EVENT_BYTES = 16 << 20
"""Bytes one event may grow to, unfinished: the largest a real one holds (the Responses API's
final event, the whole answer in it) many times over. Past it the stream is closed as an
error: a server that sends one event for ever would otherwise fill the memory."""


def _endless_event() -> str:
    return f"an event grew past {MAX_EVENT_BYTES:,} bytes without ending; closed by the client"


def _overrun(most: int, state: AttemptState) -> str:
    asked = "no max_tokens" if state.max_tokens is None else f"max_tokens {state.max_tokens:,}"
    return f"the server sent more than {most:,} events for {asked}; closed by the client"


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


def _describe(exc: UpstreamError | ProtocolError, *, recorder_started: bool) -> tuple[Outcome, str]:
    """The outcome and the message for a failure the connection reported."""
    message = str(exc)
    if isinstance(exc, UpstreamStreamError) and recorder_started:
        return Outcome.TRUNCATED, message
    return Outcome.ERROR, message
