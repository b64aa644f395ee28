"""One stream's relay line: the upstream's body in, the client's bytes out, both edges recorded.

The path of a chunk, one route for every read of every upstream (docs/gateway.md#streams)::

    upstream socket
      └─ StampedConnection (stamped/): read with its kernel stamp, TLS, HTTP (httptools)
           └─ StreamLine.feed(stamp, body), in the socket's read callback:
                cut (SSE) and what each event is (the dialect): EventCutter
                a fallback's events rewritten to fit the stream (FallbackRewriter)
                gateway-upstream record, watchdog, failover progress
                to the client at once while it keeps up (RawOutlet.try_write), else into
                the bounded buffer for the writer task; a full buffer pauses the reads
                gateway-downstream record, when the bytes went to the client

Everything happens in the read callback, in order, for each read: no task hop, no second
route, nothing to settle later. A read that ends the attempt (``[DONE]``, a failure) stops the
reads and ends the attempt (:attr:`Attempt.ended`); the relay decides what follows.
"""

from __future__ import annotations

from collections.abc import Callable

from steadystream._types import TEXT_KINDS, EventKind
from steadystream.gateway.attempt import Attempt, after_finish
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import Failure, FallbackRewriter, Piece, ReadResult
from steadystream.gateway.failover import Cause
from steadystream.gateway.writers import RawOutlet

__all__ = ["StreamLine"]


def _nothing() -> None:
    return None


_NO_READS: tuple[Callable[[], None], Callable[[], None]] = (_nothing, _nothing)


class StreamLine:
    """The line of one stream (see the module docstring); one attempt at a time runs on it."""

    __slots__ = ("_attempt", "_ctx", "_outlet", "_pause", "_paused", "_resume")

    def __init__(self, ctx: StreamContext, outlet: RawOutlet | None) -> None:
        self._ctx = ctx
        self._outlet = outlet  # None: every read goes through the buffer (a pacer)
        self._attempt: Attempt | None = None
        self._pause, self._resume = _NO_READS
        self._paused = False
        ctx.buffer.on_room = self._room

    def begin(self, attempt: Attempt) -> None:
        """From now on the reads of ``attempt``'s body come here (:meth:`feed`)."""
        self._attempt = attempt
        conn = attempt.response
        if conn is not None:
            self._pause, self._resume = conn.pause_reading, conn.resume_reading
        self._paused = False

    def release(self) -> None:
        """Let go of the attempt and the buffer's hook (both lead back here: no cycle)."""
        self._attempt = None
        self._pause, self._resume = _NO_READS
        self._ctx.buffer.on_room = None

    def feed(self, stamp: int, data: bytes) -> bool:
        """One read of the attempt's body, ``stamp`` its arrival; True: the attempt is over
        (``[DONE]`` or a failure), read no more."""
        attempt = self._attempt
        if attempt is None or attempt.ended:
            return True
        cutter = attempt.cutter
        result = cutter.feed(data)
        self._arrived(attempt, stamp, result, cutter.pending_bytes)
        pieces = result.pieces
        rewriter = attempt.rewriter
        if pieces and rewriter is not None:
            kept = _rewrite(rewriter, pieces)
            if kept is None:
                attempt.end(Failure(Cause.DIVERGED, "the regenerated answer diverged"))
                return True
            pieces = kept
            payload = b"".join(piece.raw for piece in kept)
        else:
            payload = result.data
        if pieces:
            self._advance(attempt, stamp, pieces)
            self._hand_over(attempt, Out(payload, pieces), stamp)
        failure = result.failure
        if failure is not None:
            if attempt.watchdog.finished and failure.cause is not Cause.DIVERGED:
                failure = after_finish(failure.message)
            attempt.end(failure)
            return True
        if result.done:
            attempt.watchdog.done()
            attempt.end(None)
            return True
        return False

    # -- the steps of a read ------------------------------------------------------------------

    def _arrived(self, attempt: Attempt, now: int, result: ReadResult, held: int) -> None:
        """Record a cut read at the upstream edge, as it came (before any rewriting); ``held``:
        the bytes of a half event the cutter kept once it had cut this read."""
        ctx = self._ctx
        record = ctx.record
        log = record.upstream
        t = now - record.received_ns
        if log.first_byte_ns is None:
            log.first_byte_ns = t
        if held:
            ctx.buffer.hold(held)
        cutter = attempt.cutter
        if ctx.envelope is None and cutter.envelope is not None:
            ctx.envelope = cutter.envelope
        add = log.add
        for piece in result.pieces:
            add(t, piece)
            if piece.usage_counts is not None:  # what this upstream billed, as it said
                record.attempts[attempt.index]["usage"] = dict(piece.usage_counts)

    def _advance(self, attempt: Attempt, now: int, pieces: list[Piece]) -> None:
        """What the pieces the client gets say: tokens for the watchdog, progress for failover."""
        ctx = self._ctx
        watchdog = attempt.watchdog
        progress = ctx.progress
        for piece in pieces:
            kind = piece.kind
            if kind in TEXT_KINDS:
                first = watchdog.last_token_ns is None
                watchdog.token(now)
                if first:
                    # The deadline moved from the first token's (far) to the stall's (near):
                    # the guard would sleep until the old one unless told.
                    ctx.wake_guard()
                progress.commit(kind, piece.text)
            elif kind is EventKind.ROLE:
                progress.role_sent = True
            if piece.finish is not None and attempt.all_finished(piece):
                watchdog.finish(now)
                ctx.wake_guard()
            if piece.usage >= 0:
                progress.usage_tokens = attempt.usage_base + piece.usage
            if piece.usage_counts is not None:
                ctx.record.usage = piece.usage_counts  # as the client got it

    def _hand_over(self, attempt: Attempt, out: Out, now: int) -> None:
        """To the client now while it keeps up; else into the buffer for the writer, and a
        full buffer pauses the reads (the wait does not count against the upstream)."""
        outlet = self._outlet
        buffer = self._ctx.buffer
        if outlet is not None and not buffer and outlet.try_write(out):
            return
        if buffer.add(out, out.cost, len(out.pieces)) and not self._paused:
            self._paused = True
            attempt.watchdog.pause(now)
            self._pause()

    def _room(self) -> None:
        # The writer took enough from a full buffer: read on.
        if self._paused:
            self._paused = False
            attempt = self._attempt
            if attempt is not None:
                attempt.watchdog.resume(self._ctx.clock.now_ns())
                self._ctx.wake_guard()
            self._resume()


def _rewrite(rewriter: FallbackRewriter, pieces: list[Piece]) -> list[Piece] | None:
    kept: list[Piece] = []
    for piece in pieces:
        out = rewriter.rewrite(piece)
        if rewriter.diverged:
            return None
        if out is not None:
            kept.append(out)
    return kept
