"""One upstream request of a stream, and the hot loop that reads it into the buffer.

Per read: one cut (:class:`EventCutter`: a chunk parse per event), a few array appends for
the ``gateway-upstream`` timeline, the watchdog and progress updates, and the bytes as they
came handed to the client. While the client keeps up, the express lane does all that from
the upstream socket's read callback, the bookkeeping after the loop's pass over the reads
(:func:`express_lane`); otherwise the reader task does it (:func:`read_attempt`). A
fallback's events go through its rewriter first, and never through the lane.

The reader sees a :class:`~steadystream.gateway.context.StreamContext` and its own
:class:`Attempt`, never the relay; the body comes through a
:data:`~steadystream.gateway.upstreams.BodyReader`, so the transport can change under it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from steadystream._exceptions import (
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from steadystream._types import TEXT_KINDS, EventKind
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import EventCutter, Failure, FallbackRewriter, Piece, ReadResult
from steadystream.gateway.failover import Action, Cause
from steadystream.gateway.upstreams import BodyReader, ResponseTooLargeError
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import RawOutlet, plain_socket_fd
from steadystream.stamped import StampedConnection
from steadystream.stamped.native import Lane, lane_maker

__all__ = ["Attempt", "Early", "cause_of", "express_lane", "read_attempt"]


class Attempt:
    """One upstream request of a stream."""

    __slots__ = (
        "action",
        "body",
        "choices",
        "cutter",
        "early",
        "entry",
        "failure",
        "finished_choices",
        "idle",
        "index",
        "request_id",
        "response",
        "rewriter",
        "task",
        "upstream",
        "usage_base",
        "watchdog",
    )

    def __init__(
        self,
        upstream: UpstreamConfig,
        index: int,
        request_id: str,
        watchdog: Watchdog,
        *,
        max_event_bytes: int = 1 << 20,
        choices: int = 1,
    ) -> None:
        self.upstream = upstream
        self.index = index
        self.request_id = request_id
        self.watchdog = watchdog
        self.cutter = EventCutter(max_event_bytes=max_event_bytes)
        self.rewriter: FallbackRewriter | None = None
        self.response: StampedConnection | None = None
        self.body: BodyReader | None = None
        self.task: asyncio.Task[Failure | None] | None = None
        self.failure: Failure | None = None  # set by the guard when it stops the reader
        self.action = Action.RETRY
        self.entry: dict[str, Any] | None = None  # the failover that led here
        self.usage_base = 0  # a continuation's running usage counts from here
        # Only once every choice has its finish reason is the answer over (n > 1 streams
        # finish their choices one by one, or several in one chunk).
        self.choices = choices
        self.finished_choices: set[int] = set()
        # The express lane (express_lane): the reader waits for the next read with nothing
        # of its own in hand; a read the lane cut (and perhaps sent) waits here for it.
        self.idle = False
        self.early: Early | None = None

    def all_finished(self, piece: Piece) -> bool:
        """Whether, with ``piece``'s finish reason, every choice of the answer has ended."""
        if self.choices == 1:
            return True
        self.finished_choices.update(i for i in piece.finished if 0 <= i < self.choices)
        return len(self.finished_choices) >= self.choices

    @property
    def reading(self) -> bool:
        """Its reader runs and nobody has stopped it yet."""
        task = self.task
        return task is not None and not task.done() and self.failure is None

    def close(self, *, clean: bool) -> None:
        """Close the upstream response (a stamped connection serves one request)."""
        response, self.response = self.response, None
        if response is not None:
            response.close()


class Early(NamedTuple):
    """A read the express lane cut in the read callback, left for the reader to finish."""

    data: bytes
    result: ReadResult
    # When it went to the client, its bookkeeping already in ``ctx.after_writes`` (a read
    # that ends the attempt); None: not sent, the reader accounts for it and sends it.
    sent_ns: int | None


def express_lane(
    ctx: StreamContext,
    attempt: Attempt,
    outlet: RawOutlet,
    *,
    native: Lane | None = None,
) -> Callable[[int, bytes], bool]:
    """The hook that writes a read to the client from the connection's read callback.

    With many streams, one engine step makes every upstream readable at once, and the loop
    runs every read callback before any stream's task. A read the lane takes is cut and
    written there and then, so each stream's bytes go out in the first pass over the burst,
    without a hop through the stream's task; its bookkeeping waits in ``ctx.after_writes``
    for the end of that pass (:mod:`steadystream.gateway.later`).

    It takes a read only when nothing can be out of order: the reader waits with nothing in
    hand (so no read of this stream is queued ahead), nothing waits in the buffer or is
    being sent, and the client's connection holds nothing unsent. Returns True when it took
    the read whole (the reader never sees it); a read it cut that ends the attempt, or that
    it could not send, goes to the reader as :class:`Early`.

    With ``native`` (the connection's native lane), the common read (whole content events)
    never gets here: the lane takes it in C, the same way, and keeps its records until
    :meth:`StreamContext.settle` takes them (:func:`native_records`). While a read taken
    here waits for its bookkeeping, the native lane is held, so the records keep the order
    the reads came in.
    """
    cutter = attempt.cutter
    waiting = ctx.buffer.queue
    later = ctx.after_writes.add
    if (
        native is not None
        and outlet.chunks
        and outlet.transport is not None
        and lane_maker(ctx.clock.now_ns) is not None  # (it stamps the client's edge too)
    ):
        native.arm(
            attempt=attempt,
            cutter=cutter,
            watchdog=attempt.watchdog,
            waiting=waiting,
            outlet=outlet,
            transport=outlet.transport,
            scrub=ctx.scrub,
            received_ns=ctx.record.received_ns,
            max_event_bytes=cutter.max_event_bytes,
            client_fd=plain_socket_fd(outlet.transport),
        )
    if native is not None and native.armed:  # (not when each piece's own bytes are kept)
        ctx.native_records = native_records(ctx, attempt, native)
    else:
        native = None

    def account(stamp: int, result: ReadResult, held: int, sent: int) -> None:
        # Both edges in one pass (what ``outlet.sent`` would record, and ``ctx.answered``
        # is already set for a read that ended the answer).
        try:
            _arrived(ctx, attempt, stamp, result, held, sent)
            _advance(ctx, attempt, stamp, result.pieces)
        finally:
            if native is not None:
                native.resume()

    def take(stamp: int, data: bytes) -> bool:
        if not attempt.idle:
            return False
        # Whatever happens to this read, the reader has something in hand until it runs: a
        # later read must not overtake it.
        attempt.idle = False
        if attempt.failure is not None or waiting:
            return False
        result = cutter.feed(data)
        sent = None
        if result.pieces and result.failure is None:
            sent = outlet.write_now(result.data)
            if sent is not None:
                if native is not None:
                    # What the native lane took came before this read: in the records first,
                    # and nothing more from it until this read's bookkeeping is in.
                    if (flush := ctx.native_records) is not None:
                        flush()
                    native.hold()
                later(account, stamp, result, cutter.pending_bytes, sent)
                if not result.done:
                    attempt.idle = True  # taken whole: the reader still waits
                    return True
                ctx.answered = True  # [DONE] went out: a disconnect from now on is no cancel
        attempt.early = Early(data, result, sent)
        return False

    return take


async def read_attempt(
    ctx: StreamContext, attempt: Attempt, outlet: RawOutlet | None
) -> Failure | None:
    """Read one upstream response into the stream; None once it ended cleanly."""
    read = attempt.body
    assert read is not None
    cutter = attempt.cutter
    rewriter = attempt.rewriter
    watchdog = attempt.watchdog
    while True:
        attempt.idle = True
        broken: UpstreamStreamError | None = None
        try:
            now, data = await read()  # ``now``: when the bytes reached the gateway
        except UpstreamStreamError as exc:
            broken = exc
        finally:
            attempt.idle = False
            ctx.settle()  # the lanes' reads came before this one, or this end
        if broken is not None:
            what, broken = str(broken), None  # its traceback holds this frame: no cycle
            return _after_finish(what) if watchdog.finished else Failure(Cause.RESET, what)
        if not data:
            if watchdog.finished and not cutter.pending_bytes:
                # The answer was whole; only the [DONE] marker is missing: the gateway adds it.
                return Failure(
                    Cause.SILENT_AFTER_FINISH,
                    "the upstream closed the stream after its finish reason, without [DONE]",
                )
            return Failure(Cause.RESET, cutter.error_at_end())
        early = attempt.early
        if early is None:
            result = cutter.feed(data)
            sent = None
        else:
            # The lane cut the read that came first while the reader waited: this one.
            assert early.data is data, "the express lane took a read out of order"
            attempt.early = None
            result, sent = early.result, early.sent_ns
        pieces = result.pieces
        if sent is None:  # (else the lane sent it, and its bookkeeping ran above)
            _arrived(ctx, attempt, now, result, cutter.pending_bytes)
            if pieces and rewriter is not None:
                kept = _rewrite(rewriter, pieces)
                if kept is None:
                    return Failure(Cause.DIVERGED, "the regenerated answer diverged")
                pieces = kept
                payload = b"".join(piece.raw for piece in kept)
            else:
                payload = result.data
            if pieces:
                _advance(ctx, attempt, now, pieces)
                await _hand_over(ctx, attempt, Out(payload, pieces), outlet, now)
        if result.failure is not None:
            if watchdog.finished and result.failure.cause is not Cause.DIVERGED:
                return _after_finish(result.failure.message)
            return result.failure
        if result.done:
            watchdog.done()
            return None


def native_records(ctx: StreamContext, attempt: Attempt, lane: Lane) -> Callable[[], None]:
    """What takes the native lane's records into the stream: both edges, the progress the
    failover reads, and the watchdog (one token at the last one's time: what a token per
    event would have left it at). Holds no reference to ``ctx`` (it is kept there)."""
    record = ctx.record
    progress = ctx.progress
    watchdog = attempt.watchdog

    def take() -> None:
        taken = lane.take_records()
        if taken is None:
            return
        up, down, wire, text_bytes, texts = taken
        record.upstream.add_native(record.downstream, up, down, wire, text_bytes, texts)
        progress.content += texts
        progress.text_events += len(texts)
        watchdog.token(int.from_bytes(up[-8:], sys.byteorder, signed=True) + record.received_ns)

    return take


def _arrived(
    ctx: StreamContext,
    attempt: Attempt,
    now: int,
    result: ReadResult,
    held: int,
    sent: int | None = None,
) -> None:
    """Record a cut read at the upstream edge, as it came (before any rewriting); ``held``:
    the bytes of a half event the cutter kept once it had cut this read. ``sent``: when the
    express lane handed the read whole to the client, recorded at the downstream edge too."""
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
    if sent is None:
        add = log.add
        for piece in result.pieces:
            add(t, piece)
    else:
        down = record.downstream
        t_sent = sent - record.received_ns
        if down.first_byte_ns is None:
            down.first_byte_ns = t_sent
        log.add_relayed(down, t, t_sent, result.pieces)
    for piece in result.pieces:
        if piece.usage_counts is not None:  # what this upstream billed, as it said
            record.attempts[attempt.index]["usage"] = dict(piece.usage_counts)


def _advance(ctx: StreamContext, attempt: Attempt, now: int, pieces: list[Piece]) -> None:
    """What the pieces the client gets say: tokens for the watchdog, progress for failover."""
    watchdog = attempt.watchdog
    progress = ctx.progress
    for piece in pieces:
        kind = piece.kind
        if kind in TEXT_KINDS:
            first = watchdog.last_token_ns is None
            watchdog.token(now)
            if first:
                # The deadline moved from the first token's (far) to the stall's (near): the
                # guard would sleep until the old one unless told.
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


async def _hand_over(
    ctx: StreamContext, attempt: Attempt, out: Out, outlet: RawOutlet | None, now: int
) -> None:
    buffer = ctx.buffer
    size = out.cost
    events = len(out.pieces)
    if outlet is not None and not buffer and outlet.open:
        # Nothing queued and the client keeps up: send it now, without the hop through the
        # writer task.
        await outlet.deliver(out)
    elif buffer.has_room(size, events):
        await buffer.put(out, size, events)
    else:
        # The client is slower than the upstream: stop reading, and do not count the wait
        # against the upstream.
        watchdog = attempt.watchdog
        watchdog.pause(now)
        await buffer.put(out, size, events)
        watchdog.resume(ctx.clock.now_ns())
        ctx.wake_guard()


def _after_finish(what: str) -> Failure:
    # Every choice had its finish reason: the answer is whole, only its end went wrong. It is
    # ended like a silence after the finish ([DONE] from the gateway, the reason recorded),
    # not failed over (a fallback would continue a finished answer) nor turned into an error.
    return Failure(
        Cause.SILENT_AFTER_FINISH,
        f"the upstream's stream went wrong after its finish reason: {what}",
    )


def _rewrite(rewriter: FallbackRewriter, pieces: list[Piece]) -> list[Piece] | None:
    kept: list[Piece] = []
    for piece in pieces:
        out = rewriter.rewrite(piece)
        if rewriter.diverged:
            return None
        if out is not None:
            kept.append(out)
    return kept


def cause_of(error: UpstreamError) -> Cause:
    """The failover cause of an upstream request that got no usable response."""
    if isinstance(error, UpstreamStatusError):
        return Cause.STATUS
    if isinstance(error, UpstreamTimeoutError):
        return Cause.FIRST_TOKEN_TIMEOUT
    if isinstance(error, ResponseTooLargeError):
        return Cause.OVERSIZED_EVENT
    if isinstance(error, UpstreamStreamError):
        return Cause.RESET
    return Cause.CONNECT
