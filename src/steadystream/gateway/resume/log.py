"""The events of one stream, kept in this process for readers who come back.

A :class:`StreamLog` holds a stream's stamped events in order (event ``n`` at index ``n - 1``)
up to ``max_bytes``; past it the events are dropped at once and the stream is *gone* for
resumes (it goes on for its reader): a resume must never get a silent partial. Readers wait
for more with :meth:`StreamLog.wait`, a future per waiter resolved when events come or the
stream ends, each wait bounded by a deadline on the injected clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from steadystream._clock import Clock

__all__ = ["StreamGone", "StreamLog", "follow"]


class StreamGone(Exception):
    """The events a reader asked for are not kept (any more): ``reason`` says why, in a few
    words a client can act on (expired, too_large, evicted, unknown, unresumable)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class StreamLog:
    """One stream's events (see the module docstring)."""

    __slots__ = ("_waiters", "ended", "ended_ns", "events", "gone", "max_bytes", "size")

    def __init__(self, max_bytes: int) -> None:
        self.events: list[bytes] = []
        self.size = 0
        self.max_bytes = max_bytes
        self.ended: str | None = None  # how the stream ended; None while it runs
        self.ended_ns = 0
        self.gone: StreamGone | None = None  # why its events are not kept
        self._waiters: list[asyncio.Future[None]] = []

    def add(self, events: list[bytes], size: int) -> None:
        """Keep ``events`` (``size`` bytes in all), and wake the readers waiting for them."""
        if self.gone is None:
            self.size += size
            if self.size > self.max_bytes:
                self.drop(
                    StreamGone(
                        "too_large",
                        f"the stream passed resume.max_stream_bytes ({self.max_bytes} bytes);"
                        " its events are not kept",
                    )
                )
                return
            self.events += events
        if self._waiters:
            self._wake()

    def end(self, how: str, now_ns: int) -> None:
        """The stream is over (``how``: complete, error, cancelled, ...)."""
        if self.ended is None:
            self.ended = how
            self.ended_ns = now_ns
        self._wake()

    def drop(self, gone: StreamGone) -> None:
        """Let go of the events; readers get ``gone``."""
        if self.gone is None:
            self.gone = gone
        self.events = []
        self.size = 0
        self._wake()

    async def wait(self, seen: int, clock: Clock, deadline_ns: int) -> None:
        """Until there are more than ``seen`` events, the stream ends or is gone, or the
        deadline passes (the caller looks which)."""
        if len(self.events) > seen or self.ended is not None or self.gone is not None:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        stop = clock.wake_at(deadline_ns, future)
        try:
            await future
        finally:
            stop()
            if future in self._waiters:
                self._waiters.remove(future)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)


async def follow(
    log: StreamLog, after: int, clock: Clock, idle_ns: int
) -> AsyncIterator[bytes | None]:
    """First ``b""`` (the events after ``after`` are kept), then the stored events after
    event ``after``, then the new ones as they come, until the stream ends; None each
    ``idle_ns`` with nothing new (the caller sends a keepalive).

    Raises :class:`StreamGone` when the events after ``after`` are not (all) kept.
    """
    if log.gone is not None:
        raise log.gone
    if after > len(log.events):  # (every event is in the log before a client gets it)
        raise StreamGone("unknown", f"the stream has sent no event {after}")
    yield b""
    while True:
        if log.gone is not None:
            raise log.gone
        events = log.events
        count = len(events)
        if count > after:
            chunk = b"".join(events[after:count])
            after = count
            yield chunk
            continue
        if log.ended is not None:
            return
        deadline = clock.now_ns() + idle_ns
        await log.wait(after, clock, deadline)
        if len(log.events) <= after and log.ended is None and log.gone is None:
            yield None
