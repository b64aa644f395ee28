"""One stream's relay line: the upstream's body in, the client's bytes out, both edges recorded.

The path of a chunk, one route for every read of every upstream (docs/gateway.md#streams)::

    upstream socket
      └─ StampedConnection (stamped/): read with its kernel stamp, TLS, HTTP (httptools)
           └─ StreamLine.feed(stamp, body), in the socket's read callback:
                cut (SSE) and what each event is (the dialect): EventCutter
                a fallback's events rewritten to fit the stream (FallbackRewriter), or
                  translated into the client's API (gateway/translation)
                gateway-upstream record, watchdog, failover progress
                each event's id: line, and the events kept for a resume (gateway/resume)
                to the client at once while it keeps up (RawOutlet.try_write), else into
                the bounded buffer for the writer task; a full buffer pauses the reads
                gateway-downstream record, when the bytes went to the client

Everything happens in the read callback, in order, for each read: no task hop, no second
route, nothing to settle later. A read that ends the attempt (``[DONE]``, a failure) stops the
reads and ends the attempt (:attr:`Attempt.ended`); the relay decides what follows.

Written once, here, in Python; where the package was built with a compiler it also runs
compiled by Cython (``_line_c``, its types in ``_line_c.pxd``; :mod:`steadystream._build`).
The line reads only its own fields and what it is given: the stream's context, the outlet,
and an attempt's watchdog, cutter, rewriter and connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from steadystream._exceptions import ProtocolError
from steadystream._types import TEXT_KINDS, EventKind
from steadystream.gateway.attempt import Attempt, EventCut, after_finish
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import Failure, Piece, ReadResult, Rewriter
from steadystream.gateway.failover import Cause
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import RawOutlet
from steadystream.protocol.chat import chat_dialect
from steadystream.protocol.dialect import Dialect
from steadystream.protocol.sse import SseEvent, new_decoder

__all__ = ["EventCutter", "StreamLine"]

_KEEPALIVE = EventKind.KEEPALIVE  # (an enum's member read per event costs a lookup)
_ERROR = EventKind.ERROR
_ROLE = EventKind.ROLE
_EMPTY = ReadResult(b"", [])
# Records are made as tuples of their class, every field given: a NamedTuple's own
# ``__new__`` is a Python function, a call too many on every event of every stream.
_new = tuple.__new__


def _nothing() -> None:
    return None


_NO_READS: tuple[Callable[[], None], Callable[[], None]] = (_nothing, _nothing)


class EventCutter:
    """Cuts one upstream body into events, and says what each is; one per attempt.

    The cut is the one SSE decoder (:class:`~steadystream.protocol.sse.SseDecoder`); what
    each event is, the upstream's dialect says (:mod:`steadystream.protocol.dialect`). The
    bytes go on as they came: a read's complete events, whole. The half event a read leaves
    is kept in a growing ``bytearray`` and joined once, when the event completes: a large
    event in many small reads costs linear time, not a copy of everything so far on every
    read. An event larger than ``max_event_bytes`` fails the stream
    (:attr:`Cause.OVERSIZED_EVENT`): no real chunk comes near it, and holding it would let
    one upstream take the gateway's memory. More than ``max_stream_events`` events fail it too
    (:attr:`Cause.STREAM_TOO_LONG`), after the read that passed the bound is relayed: an
    upstream that never stops would grow what the stream keeps of each event without end.
    """

    __slots__ = (
        "_carry",
        "_decoder",
        "_dialect",
        "_events",
        "keep_raw",
        "max_event_bytes",
        "max_stream_events",
    )

    def __init__(
        self,
        *,
        keep_raw: bool = True,
        max_event_bytes: int = 1 << 20,
        max_stream_events: int = 1 << 62,
        dialect: Dialect | None = None,
    ) -> None:
        self._decoder = new_decoder()
        self._dialect: Dialect = dialect if dialect is not None else chat_dialect()
        self._carry = bytearray()
        # Each piece's own bytes (and its payload) are needed only to re-send pieces one by
        # one (a pacer, a fallback's rewriter); a plain relay forwards the read's bytes whole.
        self.keep_raw = keep_raw
        self.max_event_bytes = max_event_bytes
        self.max_stream_events = max_stream_events
        self._events = 0  # events cut so far

    @property
    def envelope(self) -> dict[str, Any] | None:
        """What the dialect's first event said a fallback's events must carry."""
        return self._dialect.envelope

    @property
    def pending_bytes(self) -> int:
        """Bytes of the unfinished event held until its end arrives."""
        return len(self._carry)

    def feed(self, data: bytes) -> ReadResult:
        """One read: the events it completed (stopping at ``[DONE]`` or a failure)."""
        decoder = self._decoder
        items = decoder.feed(data)
        pending = decoder.undispatched_bytes
        if not items:
            self._carry += data
            if pending > self.max_event_bytes:
                return self._oversized(pending)
            return _EMPTY
        if self._carry:
            self._carry += data
            buf = bytes(self._carry)
        else:
            buf = data
        complete = len(buf) - pending
        self._carry = bytearray(buf[complete:]) if pending else bytearray()
        keep_raw = self.keep_raw
        limit = self.max_event_bytes
        decode = self._dialect.decode
        pieces: list[Piece] = []
        offset = 0
        for item in items:
            wire = item.wire_bytes
            end = offset + wire
            if wire > limit:
                return ReadResult(buf[:offset], pieces, self._too_large(wire))
            try:
                decoded = decode(item)
            except ProtocolError as exc:
                return ReadResult(buf[:offset], pieces, Failure(Cause.BAD_PAYLOAD, str(exc)))
            kind = decoded.kind
            if kind is None:  # the end of the answer (Responses' carries its usage)
                pieces.append(
                    Piece(
                        None,
                        "",
                        buf[offset:end],
                        wire,
                        decoded.usage,
                        decoded.finish,
                        "",
                        decoded.usage_counts,
                        decoded.finished,
                    )
                )
                return ReadResult(buf[:end], pieces, None, True)
            if kind is _KEEPALIVE:
                pieces.append(Piece(kind, "", buf[offset:end], wire))
            elif kind is _ERROR:
                message = decoded.error or "error event with no message"
                return ReadResult(buf[:offset], pieces, Failure(Cause.UPSTREAM_ERROR, message))
            else:
                piece = (
                    kind,
                    decoded.text,
                    buf[offset:end] if keep_raw else b"",
                    wire,
                    decoded.usage,
                    decoded.finish,
                    item.data if keep_raw and type(item) is SseEvent else "",
                    decoded.usage_counts,
                    decoded.finished,
                )
                pieces.append(_new(Piece, piece))
            offset = end
        self._events += len(pieces)
        if self._events > self.max_stream_events:
            return ReadResult(buf[:offset], pieces, self._too_long())
        if pending > limit:
            return ReadResult(buf[:offset], pieces, self._oversized(pending).failure)
        data = buf[:complete] if offset == complete else buf[:offset]
        return _new(ReadResult, (data, pieces, None, False))

    def _too_large(self, size: int) -> Failure:
        return Failure(
            Cause.OVERSIZED_EVENT,
            f"an upstream event of {size} bytes is larger than limits.max_event_bytes "
            f"({self.max_event_bytes})",
        )

    def _too_long(self) -> Failure:
        return Failure(
            Cause.STREAM_TOO_LONG,
            f"the upstream sent more than limits.max_stream_events ({self.max_stream_events})"
            " events in one stream",
        )

    def _oversized(self, pending: int) -> ReadResult:
        # The half event stays (and shows in pending_bytes) until the attempt is dropped.
        return ReadResult(
            b"",
            [],
            Failure(
                Cause.OVERSIZED_EVENT,
                f"an upstream event grew past limits.max_event_bytes ({self.max_event_bytes} "
                f"bytes) without ending ({pending} bytes so far)",
            ),
        )

    def error_at_end(self) -> str:
        """Why a body that ended here is not a complete stream."""
        if self._decoder.in_event or self._carry:
            return "the upstream connection closed mid-event"
        # (A typed dialect names its own end: Messages and Responses send no [DONE].)
        return f"the upstream stream ended without {getattr(self._dialect, 'END', '[DONE]')}"


class StreamLine:
    """The line of one stream (see the module docstring); one attempt at a time runs on it.

    It takes what it uses from the stream's context once, at construction, and from an
    attempt once, at :meth:`begin`; each read then touches only its own fields.
    """

    __slots__ = (
        "_attempt",
        "_buffer",
        "_ctx",
        "_cutter",
        "_now_ns",
        "_outlet",
        "_pause",
        "_paused",
        "_progress",
        "_received_ns",
        "_record",
        "_resume",
        "_rewriter",
        "_stamp",
        "_up",
        "_usage_base",
        "_wake_guard",
        "_watchdog",
    )

    def __init__(
        self,
        ctx: StreamContext,
        outlet: RawOutlet | None,
        stamp: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._ctx = ctx  # (for the envelope the first upstream's events give: once)
        self._outlet = outlet  # None: every read goes through the buffer (a pacer)
        # The events' ``id:`` lines, and the tee that keeps them for readers who come back
        # (gateway/resume): None without resume, or under a pacer (its writer stamps).
        self._stamp = stamp
        self._buffer = ctx.buffer
        self._progress = ctx.progress
        self._record = ctx.record
        self._up = ctx.record.upstream
        self._received_ns = ctx.record.received_ns
        self._now_ns = ctx.clock.now_ns
        self._wake_guard = ctx.wake_guard
        self._attempt: Attempt | None = None
        self._cutter: EventCut | None = None
        self._rewriter: Rewriter | None = None
        self._watchdog: Watchdog | None = None
        self._usage_base = 0
        self._pause, self._resume = _NO_READS
        self._paused = False
        ctx.buffer.on_room = self._room

    def begin(self, attempt: Attempt) -> None:
        """From now on the reads of ``attempt``'s body come here (:meth:`feed`)."""
        self._attempt = attempt
        self._cutter = attempt.cutter
        self._rewriter = attempt.rewriter
        self._watchdog = attempt.watchdog
        self._usage_base = attempt.usage_base
        conn = attempt.response
        if conn is not None:
            self._pause, self._resume = conn.pause_reading, conn.resume_reading
        self._paused = False

    def release(self) -> None:
        """Let go of the attempt and the buffer's hook (both lead back here: no cycle)."""
        self._attempt = None
        self._cutter = None
        self._rewriter = None
        self._watchdog = None
        self._pause, self._resume = _NO_READS
        self._buffer.on_room = None
        self._wake_guard = _nothing
        self._stamp = None

    def feed(self, stamp: int, data: bytes) -> bool:
        """One read of the attempt's body, ``stamp`` its arrival; True: the attempt is over
        (``[DONE]`` or a failure), read no more."""
        attempt = self._attempt
        cutter = self._cutter
        watchdog = self._watchdog
        if attempt is None or cutter is None or watchdog is None or attempt.ended:
            return True
        result = cutter.feed(data)
        self._arrived(attempt, cutter, stamp, result)
        pieces = result.pieces
        sent = pieces
        rewriter = self._rewriter
        if pieces and rewriter is not None:
            kept = _rewrite(rewriter, pieces)
            if kept is None:
                attempt.end(rewriter.failure)  # (a piece is dropped for a reason)
                return True
            pieces = kept
            # A rewritten piece with no bytes (a translated usage chunk) counts for the
            # watchdog and the progress, but nothing of it goes to the client.
            sent = [piece for piece in kept if piece.raw]
            payload = b"".join([piece.raw for piece in sent])
        else:
            payload = result.data
        if pieces:
            self._advance(attempt, watchdog, stamp, pieces)
            if sent:
                if self._stamp is not None:  # each event's id:, and the events kept (resume)
                    payload = self._stamp(payload)
                self._hand_over(watchdog, _new(Out, (payload, sent)), stamp)
        failure = result.failure
        if failure is not None:
            if watchdog.finished and failure.cause is not Cause.DIVERGED:
                failure = after_finish(failure.message)
            attempt.end(failure)
            return True
        if result.done:
            watchdog.done()
            attempt.end(None)
            return True
        return False

    # -- the steps of a read ------------------------------------------------------------------

    def _arrived(self, attempt: Attempt, cutter: EventCut, now: int, result: ReadResult) -> None:
        """Record a cut read at the upstream edge, as it came (before any rewriting)."""
        log = self._up
        t = now - self._received_ns
        if log.first_byte_ns is None:
            log.first_byte_ns = t
        held = cutter.pending_bytes  # a half event, kept until its end arrives
        if held:
            self._buffer.hold(held)
        ctx = self._ctx
        if ctx.envelope is None and (envelope := cutter.envelope) is not None:
            ctx.envelope = envelope
        add = log.add
        for piece in result.pieces:
            add(t, piece)
            if piece.usage_counts is not None:  # what this upstream billed, as it said
                self._record.attempts[attempt.index]["usage"] = dict(piece.usage_counts)

    def _advance(self, attempt: Attempt, watchdog: Watchdog, now: int, pieces: list[Piece]) -> None:
        """What the pieces the client gets say: tokens for the watchdog, progress for failover."""
        progress = self._progress
        for piece in pieces:
            kind = piece.kind
            if kind in TEXT_KINDS:
                first = not watchdog.seen_token
                watchdog.token(now)
                if first:
                    # The deadline moved from the first token's (far) to the stall's (near):
                    # the guard would sleep until the old one unless told.
                    self._wake_guard()
                progress.commit(kind, piece.text)
            elif kind is _ROLE:
                progress.role_sent = True
            if piece.finish is not None and attempt.all_finished(piece):
                watchdog.finish(now)
                self._wake_guard()
            if piece.usage >= 0:
                progress.usage_tokens = self._usage_base + piece.usage
            if piece.usage_counts is not None:
                self._record.usage = piece.usage_counts  # as the client got it

    def _hand_over(self, watchdog: Watchdog, out: Out, now: int) -> None:
        """To the client now while it keeps up; else into the buffer for the writer, and a
        full buffer pauses the reads (the wait does not count against the upstream)."""
        outlet = self._outlet
        buffer = self._buffer
        if outlet is not None and not buffer and outlet.try_write(out):
            return
        if buffer.add(out, out.cost, len(out.pieces)) and not self._paused:
            self._paused = True
            watchdog.pause(now)
            self._pause()

    def _room(self) -> None:
        # The writer took enough from a full buffer: read on.
        if self._paused:
            self._paused = False
            watchdog = self._watchdog
            if watchdog is not None:
                watchdog.resume(self._now_ns())
                self._wake_guard()
            self._resume()


def _rewrite(rewriter: Rewriter, pieces: list[Piece]) -> list[Piece] | None:
    kept: list[Piece] = []
    for piece in pieces:
        out = rewriter.rewrite(piece)
        if out is not None:
            kept.append(out)
        elif rewriter.failure is not None:
            return None
    return kept
