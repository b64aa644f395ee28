"""The events of one stream, kept in this process for readers who come back.

(The log, which the tee writes to on the relay's path, is in
:mod:`steadystream.gateway.resume._tee_py`, compiled with the tee; it is told here.)
A :class:`StreamLog` holds a stream's stamped events in order (event ``n`` at index ``n - 1``)
up to ``max_bytes``; past it the events are dropped at once and the stream is *gone* for
resumes (it goes on for its reader): a resume must never get a silent partial. Readers wait
for more with :meth:`StreamLog.wait`, a future per waiter resolved when events come or the
stream ends, each wait bounded by a deadline on the injected clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from steadystream._clock import Clock
from steadystream.gateway.resume._tee_py import StreamLog
from steadystream.gateway.resume.gone import StreamGone

__all__ = ["StreamGone", "StreamLog", "follow"]


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
