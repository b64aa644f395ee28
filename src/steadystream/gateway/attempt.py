"""One upstream request of a stream, and the wait for its end.

Its body goes read by read through the stream's line (:class:`~steadystream.gateway.line.
StreamLine`), from the connection's read callback; :func:`read_attempt` only waits for the
end and says what it was: ``None`` for an answer that ended cleanly (``[DONE]``), else the
:class:`Failure` the relay acts on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from steadystream._exceptions import (
    ProtocolError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.events import Failure, Piece, ReadResult, Rewriter
from steadystream.gateway.failover import Action, Cause
from steadystream.gateway.upstreams import ResponseTooLargeError
from steadystream.gateway.watchdog import Watchdog

__all__ = ["Attempt", "UpstreamBody", "after_finish", "cause_of", "read_attempt"]

BodySink = Callable[[int, bytes], bool]


class EventCut(Protocol):
    """An attempt's event cutter (:class:`~steadystream.gateway.line.EventCutter`)."""

    keep_raw: bool

    @property
    def pending_bytes(self) -> int: ...

    @property
    def envelope(self) -> dict[str, Any] | None: ...

    def feed(self, data: bytes) -> ReadResult: ...

    def error_at_end(self) -> str: ...


class UpstreamBody(Protocol):
    """What an attempt reads its body from: a :class:`~steadystream.stamped.
    StampedConnection`, or the stream of a whole answer (gateway/unstreamed.py)."""

    async def stream_body(self, sink: BodySink) -> int: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class Attempt:
    """One upstream request of a stream."""

    __slots__ = (
        "action",
        "choices",
        "cutter",
        "end_failure",
        "ended",
        "entry",
        "failure",
        "finished_choices",
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
        cutter: EventCut,
        *,
        choices: int = 1,
    ) -> None:
        self.upstream = upstream
        self.index = index
        self.request_id = request_id
        self.watchdog = watchdog
        self.cutter = cutter  # the events of its body (gateway/line.py)
        self.rewriter: Rewriter | None = None  # a fallback's, or a translation's
        self.response: UpstreamBody | None = None
        self.task: asyncio.Task[Failure | None] | None = None
        self.failure: Failure | None = None  # set by the guard when it stops the reader
        self.action = Action.RETRY
        self.entry: dict[str, Any] | None = None  # the failover that led here
        self.usage_base = 0  # a continuation's running usage counts from here
        # Only once every choice has its finish reason is the answer over (n > 1 streams
        # finish their choices one by one, or several in one chunk).
        self.choices = choices
        self.finished_choices: set[int] = set()
        # How the body ended, as the line saw it: [DONE] (no failure) or a failure.
        self.ended = False
        self.end_failure: Failure | None = None

    def end(self, failure: Failure | None) -> None:
        """The line saw the answer end: ``[DONE]`` (None) or ``failure``."""
        if not self.ended:
            self.ended = True
            self.end_failure = failure

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


async def read_attempt(attempt: Attempt, feed: BodySink) -> Failure | None:
    """Stream ``attempt``'s body into ``feed`` (the stream's line) until it ends; None once
    it ended cleanly, else why not."""
    conn = attempt.response
    assert conn is not None
    watchdog = attempt.watchdog
    try:
        await conn.stream_body(feed)
    except (UpstreamStreamError, ProtocolError) as exc:
        if attempt.ended:  # the answer was in before the connection broke
            return attempt.end_failure
        what = f"the connection to upstream {attempt.upstream.name!r} broke: {exc}"
        return after_finish(what) if watchdog.finished else Failure(Cause.RESET, what)
    if attempt.ended:
        return attempt.end_failure
    cutter = attempt.cutter
    if watchdog.finished and not cutter.pending_bytes:
        # The answer was whole; only the [DONE] marker is missing: the gateway adds it.
        return Failure(
            Cause.SILENT_AFTER_FINISH,
            "the upstream closed the stream after its finish reason, without [DONE]",
        )
    return Failure(Cause.RESET, cutter.error_at_end())


def after_finish(what: str) -> Failure:
    # Every choice had its finish reason: the answer is whole, only its end went wrong. It is
    # ended like a silence after the finish ([DONE] from the gateway, the reason recorded),
    # not failed over (a fallback would continue a finished answer) nor turned into an error.
    return Failure(
        Cause.SILENT_AFTER_FINISH,
        f"the upstream's stream went wrong after its finish reason: {what}",
    )


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
