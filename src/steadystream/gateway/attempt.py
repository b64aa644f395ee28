"""One upstream request of a stream, and the hot loop that reads it into the buffer.

Per read: one SSE decode and one chunk parse per event (:class:`EventCutter`), a few array
appends for the ``gateway-upstream`` timeline, the watchdog and progress updates, and one
buffer put of the bytes as they came. A fallback's events go through its rewriter first.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiohttp

from steadystream._exceptions import UpstreamError, UpstreamStatusError
from steadystream._types import TEXT_KINDS, EventKind
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.events import EventCutter, Failure, FallbackRewriter, Piece
from steadystream.gateway.failover import Action, Cause
from steadystream.gateway.upstreams import UpstreamTimeoutError
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import Out

if TYPE_CHECKING:
    from steadystream.gateway.relay import StreamRelay

__all__ = ["Attempt", "cause_of", "read_attempt"]


class Attempt:
    """One upstream request of a stream."""

    __slots__ = (
        "action",
        "cutter",
        "entry",
        "failure",
        "index",
        "request_id",
        "response",
        "rewriter",
        "task",
        "upstream",
        "watchdog",
    )

    def __init__(
        self, upstream: UpstreamConfig, index: int, request_id: str, watchdog: Watchdog
    ) -> None:
        self.upstream = upstream
        self.index = index
        self.request_id = request_id
        self.watchdog = watchdog
        self.cutter = EventCutter()
        self.rewriter: FallbackRewriter | None = None
        self.response: aiohttp.ClientResponse | None = None
        self.task: asyncio.Task[Failure | None] | None = None
        self.failure: Failure | None = None  # set by the guard when it stops the reader
        self.action = Action.RETRY
        self.entry: dict[str, Any] | None = None  # the failover that led here

    def close(self, *, clean: bool) -> None:
        """Close the upstream response: released to the pool after a clean end, else dropped."""
        response, self.response = self.response, None
        if response is None:
            return
        if clean:
            response.release()
        else:
            response.close()


async def read_attempt(relay: StreamRelay, attempt: Attempt) -> Failure | None:
    """Read one upstream response into the relay's buffer; None once it ended cleanly."""
    response = attempt.response
    assert response is not None
    content = response.content
    cutter = attempt.cutter
    rewriter = attempt.rewriter
    watchdog = attempt.watchdog
    buffer = relay.buffer
    progress = relay.progress
    clock = relay.clock
    upstream_log = relay.record.upstream
    received = relay.record.received_ns
    usage_base = relay.usage_base
    while True:
        try:
            data = await content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            return Failure(Cause.RESET, f"the upstream connection broke: {exc}")
        if not data:
            return Failure(Cause.RESET, cutter.error_at_end())
        now = clock.now_ns()
        t = now - received
        if upstream_log.first_byte_ns is None:
            upstream_log.first_byte_ns = t
        result = cutter.feed(data)
        pieces = result.pieces
        if relay.envelope is None and cutter.envelope is not None:
            relay.envelope = cutter.envelope
        if pieces:
            add = upstream_log.add
            for piece in pieces:
                add(t, piece)
            if rewriter is not None:
                kept = _rewrite(rewriter, pieces)
                if kept is None:
                    return Failure(Cause.DIVERGED, "the regenerated answer diverged")
                pieces = kept
                payload = b"".join(piece.raw for piece in kept)
            else:
                payload = result.data
            for piece in pieces:
                kind = piece.kind
                if kind in TEXT_KINDS:
                    first = watchdog.last_token_ns is None
                    watchdog.token(now)
                    if first:
                        # The deadline moved from the first token's (far) to the stall's
                        # (near): the guard would sleep until the old one unless told.
                        relay.guard.poke()
                    progress.commit(kind, piece.text)
                elif kind is EventKind.ROLE:
                    progress.role_sent = True
                if piece.finish is not None:
                    watchdog.finish()
                if piece.usage >= 0:
                    progress.usage_tokens = usage_base + piece.usage
            if pieces:
                size = len(payload)
                outlet = relay.outlet
                if outlet is not None and not buffer and outlet.open:
                    # Nothing queued and the client keeps up: send it now, without the hop
                    # through the writer task.
                    await outlet.deliver(Out(payload, pieces))
                elif buffer.has_room(size):
                    await buffer.put(Out(payload, pieces), size)
                else:
                    # The client is slower than the upstream: stop reading, and do not count
                    # the wait against the upstream.
                    watchdog.pause(now)
                    await buffer.put(Out(payload, pieces), size)
                    watchdog.resume(clock.now_ns())
                    relay.guard.poke()
        if result.failure is not None:
            return result.failure
        if result.done:
            watchdog.finish()
            return None


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
    return Cause.CONNECT
