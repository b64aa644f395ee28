"""SSE ``id:`` lines on the events the gateway sends, and the tee that keeps them.

An event's id is its decimal sequence number in its stream, from 1 (clients treat it as
opaque and monotonic). The line goes last in the event, just before the blank line that ends
it: SSE's last field wins, so an ``id:`` an upstream wrote itself cannot shadow ours. Pure
comments (``: keepalive``) are no events a client dispatches: they pass without an id, and
are not kept for replay.

The bytes handed here are whole events (the relay cuts at event boundaries), in any of the
line endings SSE allows; one regular-expression pass over a read finds their ends.

The tee keeps the stamped events in the stream's :class:`StreamLog` (this process's copy,
which readers who come back here follow, and the Redis store reads from): up to
``max_bytes``, past which the events are dropped at once and the stream is *gone* for
resumes (it goes on for its reader), never a silent partial.

Every read of a stream with resume on comes through :meth:`StreamTee.stamp`, so this is
written once, here, in Python, and where the package was built with a compiler it also runs
compiled by Cython (``_tee_c``, its types in ``_tee_c.pxd``; :mod:`steadystream._build`). The
tee reads only its own fields and calls only what it was given: the stream's logs.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, Protocol

from steadystream._clock import Clock
from steadystream.gateway.resume.gone import StreamGone

__all__ = ["EventKeeper", "StreamLog", "StreamTee", "stamp_events"]

# The blank line that ends an event: two line ends, each CRLF, LF or CR. A CR followed by
# an LF is one line end, never two (CR, then LF): the first is a lone CR only when no LF
# follows it, or the CRLF between two lines of one event would read as a blank line.
_EVENT_END = re.compile(rb"(\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_COLON = 58  # ":": a line that starts with it is a comment
_LF = 10


class EventKeeper(Protocol):
    """Where a stream's stamped events are kept: this process's log (:class:`StreamLog`)."""

    def add(self, events: list[bytes], size: int) -> None: ...

    def keep(self, event: bytes) -> None: ...


class SharedKeeper(Protocol):
    """The store shared by every process (Redis), when there is one."""

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None: ...


class StreamLog:
    """One stream's events (see the module docstring)."""

    __slots__ = (
        "_news",
        "_news_token",
        "_waiters",
        "ended",
        "ended_ns",
        "events",
        "gone",
        "max_bytes",
        "size",
    )

    def __init__(self, max_bytes: int) -> None:
        self.events: list[bytes] = []
        self.size = 0
        self.max_bytes = max_bytes
        self.ended: str | None = None  # how the stream ended; None while it runs
        self.ended_ns = 0
        self.gone: StreamGone | None = None  # why its events are not kept
        self._waiters: list[asyncio.Future[None]] = []
        self._news: list[Any] | None = None  # told once of what comes next (tell_news)
        self._news_token: object = None

    def tell_news(self, news: list[Any], token: object) -> None:
        """Append ``token`` to ``news`` once, when the next events come or the log lets go of
        them: whoever reads the log elsewhere (the Redis store) looks only at logs with news,
        and the relay's path does one test more, not a call."""
        self._news = news
        self._news_token = token

    def _told(self) -> None:
        news = self._news
        if news is not None:
            self._news = None
            news.append(self._news_token)

    def add(self, events: list[bytes], size: int) -> None:
        """Keep ``events`` (``size`` bytes in all), and wake the readers waiting for them."""
        if self.gone is None:
            self.size += size
            if self.size > self.max_bytes:
                self._too_large()
                return
            self.events += events
            if self._news is not None:
                self._told()
        if self._waiters:
            self._wake()

    def keep(self, event: bytes) -> None:
        """Keep one event (:meth:`add` of ``[event]``: most reads bring one)."""
        if self.gone is None:
            self.size += len(event)
            if self.size > self.max_bytes:
                self._too_large()
                return
            self.events.append(event)
            if self._news is not None:
                self._told()
        if self._waiters:
            self._wake()

    def _too_large(self) -> None:
        self.drop(
            StreamGone(
                "too_large",
                f"the stream passed resume.max_stream_bytes ({self.max_bytes} bytes);"
                " its events are not kept",
            )
        )

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
        self._told()
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


def stamp_events(data: bytes, next_id: int) -> tuple[bytes, list[bytes]]:
    """``data`` with an ``id:`` line in each event, numbered from ``next_id``; and the
    stamped events (the comments left out), in order.

    Bytes after the last event's end (none, from the relay) go on unstamped.
    """
    if _one_event(data):  # (most reads of most upstreams): no scan
        event = _stamped_one(data, next_id)
        return event, [event]
    parts: list[bytes] = []
    events: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(data):
        end = match.end()
        if data[start] == _COLON and _is_comment(data, start, end):
            parts.append(data[start:end])
        else:
            cut = match.end(1)
            event = b"%sid: %d\n%s" % (data[start:cut], next_id, data[cut:end])
            next_id += 1
            parts.append(event)
            events.append(event)
        start = end
    if start < len(data):
        parts.append(data[start:])
    if len(parts) == 1:
        return parts[0], events
    return b"".join(parts), events


def _one_event(data: bytes) -> bool:
    """Whether ``data`` is one event of one line (no comment), LF-ended, with its blank line:
    what chat upstreams send. (A search for one byte is the cheap one.)"""
    size = len(data)
    return (
        size > 2
        and data[0] != _COLON
        and data.find(b"\n") == size - 2
        and data[size - 1] == _LF
        and data.find(b"\r") < 0
    )


def _stamped_one(data: bytes, event_id: int) -> bytes:
    """The one event of ``data`` (:func:`_one_event`) with its ``id:`` line."""
    return b"%sid: %d\n\n" % (data[:-1], event_id)


def _is_comment(data: bytes, start: int, end: int) -> bool:
    """Whether the event in ``data[start:end]``, which starts with a comment line, has no
    field at all (nothing a client would dispatch)."""
    return all(not line or line[0] == _COLON for line in data[start:end].splitlines())


class StreamTee:
    """Stamps a stream's events with their ids and keeps them (on the relay's path).

    ``local`` keeps them in this process, ``shared`` (when given) in the store every process
    reads; ``scrub`` hides upstream keys in what is kept, as it does in what the client gets.
    """

    __slots__ = ("_local", "_scrub", "_shared", "next_id", "stream_id", "watch")

    def __init__(
        self,
        stream_id: str,
        local: EventKeeper,
        shared: SharedKeeper | None,
        scrub: Callable[[bytes], bytes] | None,
    ) -> None:
        self.stream_id = stream_id
        self.next_id = 1
        self._local = local  # (this process's copy, held here: no lookup per read)
        self._shared = shared
        self._scrub = scrub
        # Looks at the first events for what names the stream otherwise (a response's id);
        # None once it found it, or gave up.
        self.watch: Callable[[list[bytes]], None] | None = None

    def stamp(self, data: bytes) -> bytes:
        """``data`` (whole events) with an ``id:`` in each event; the events kept."""
        first = self.next_id
        plain = self._scrub is None and self._shared is None and self.watch is None
        if plain and _one_event(data):  # one event, kept as it goes (most reads, no keys)
            event = _stamped_one(data, first)
            self.next_id = first + 1
            self._local.keep(event)
            return event
        stamped, events = stamp_events(data, first)
        count = len(events)
        if count:
            self.next_id = first + count
            scrub = self._scrub
            if scrub is not None:
                events = [scrub(event) for event in events]
            # What is kept (the scrubbed events), counted once for both stores' bounds.
            size = len(events[0]) if count == 1 else sum(map(len, events))
            self._local.add(events, size)
            shared = self._shared
            if shared is not None:
                shared.append(self.stream_id, first, events, size)
            if self.watch is not None:
                self.watch(events)
        return stamped
