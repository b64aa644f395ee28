"""Backpressure: the bounded buffer between the upstream reader and the client writer.

One reader puts, one writer gets. The buffer holds at most ``max_bytes`` (one item larger
than that is let in alone, so a big read never deadlocks) and ``max_events`` events (an item
is one read, holding one or more events). The stream's line adds each read that the client
could not take at once (:meth:`StreamBuffer.add`, from the upstream's read callback, where
nothing may wait): an add that fills the buffer pauses the upstream's reads until the writer
has made room again (``on_room``), so the kernel's buffers fill and TCP flow control slows
the upstream. The relay's own last words (an in-band error, ``[DONE]``) wait for room
(:meth:`StreamBuffer.put`). Per-stream memory is therefore bounded, and the
buffer measures its own peak, counting also the half event the reader holds outside it
(:meth:`StreamBuffer.hold`), so one huge event shows in the peak.

:class:`StuckClient` is the pure rule for a client that stopped reading: a write that has
not completed for ``stuck_timeout`` while the client's connection took nothing of what was
waiting to go out means the client has drained nothing for that long. A slow reader that
keeps draining, however slowly, is not stuck.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sized
from typing import Generic, TypeVar

from steadystream._types import Nanos

__all__ = ["StreamBuffer", "StuckClient"]

T = TypeVar("T")


class StreamBuffer(Generic[T]):
    """A bounded FIFO of items with byte sizes, for one producer and one consumer."""

    __slots__ = (
        "_closed",
        "_getter",
        "_items",
        "_putter",
        "bytes",
        "events",
        "max_bytes",
        "max_events",
        "on_room",
        "peak_bytes",
        "waits",
    )

    def __init__(self, *, max_bytes: int, max_events: int) -> None:
        if max_bytes < 1 or max_events < 1:
            raise ValueError("a buffer holds at least one byte and one event")
        self.max_bytes = max_bytes
        self.max_events = max_events
        self._items: deque[tuple[T, int, int]] = deque()
        self._getter: asyncio.Future[None] | None = None
        self._putter: asyncio.Future[None] | None = None
        self._closed = False
        self.bytes = 0
        self.events = 0
        self.peak_bytes = 0
        self.waits = 0  # how often the reader had to wait: the client was slower
        # Called when the writer took an item and the buffer has room again after an add
        # that filled it (the line resumes the upstream's reads).
        self.on_room: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def queue(self) -> Sized:
        """The items waiting, live (the same object for the buffer's life): a hot path binds
        it once and asks ``if queue:`` without a call into this class per read."""
        return self._items

    @property
    def closed(self) -> bool:
        return self._closed

    def has_room(self, size: int, events: int = 1) -> bool:
        if not self._items:
            return True
        return self.events + events <= self.max_events and self.bytes + size <= self.max_bytes

    async def put(self, item: T, size: int, events: int = 1) -> None:
        """Add ``item`` (``size`` bytes, ``events`` events), waiting while the buffer is full."""
        if self._closed:
            raise RuntimeError("put() on a closed buffer")
        if not self.has_room(size, events):
            self.waits += 1
            while not self.has_room(size, events):
                self._putter = asyncio.get_running_loop().create_future()
                try:
                    await self._putter
                finally:
                    self._putter = None
        self._add(item, size, events)

    def add(self, item: T, size: int, events: int = 1) -> bool:
        """Add ``item`` without waiting, full or not; True when the buffer is now full (the
        caller stops producing until ``on_room`` is called)."""
        if self._closed:
            raise RuntimeError("add() on a closed buffer")
        self._add(item, size, events)
        if self.full:
            self.waits += 1
            return True
        return False

    @property
    def full(self) -> bool:
        """At its bounds (or past them by the one item that crossed them)."""
        return self.events >= self.max_events or self.bytes >= self.max_bytes

    def offer(self, item: T, size: int) -> bool:
        """Add ``item`` only if nothing is waiting to be written (keepalives use this)."""
        if self._closed or self._items:
            return False
        self._add(item, size, 1)
        return True

    def hold(self, size: int) -> None:
        """The reader holds ``size`` more bytes outside the buffer (a half event): peak them."""
        if self.bytes + size > self.peak_bytes:
            self.peak_bytes = self.bytes + size

    async def get(self) -> T | None:
        """The next item, waiting for one; None once the buffer is closed and empty."""
        while not self._items:
            if self._closed:
                return None
            self._getter = asyncio.get_running_loop().create_future()
            try:
                await self._getter
            finally:
                self._getter = None
        item, size, events = self._items.popleft()
        self.bytes -= size
        self.events -= events
        putter = self._putter
        if putter is not None and not putter.done():
            putter.set_result(None)
        if (room := self.on_room) is not None and not self.full:
            room()
        return item

    def close(self) -> None:
        """No more items; :meth:`get` returns None once the rest is taken."""
        self._closed = True
        self._wake_getter()

    def _add(self, item: T, size: int, events: int) -> None:
        self._items.append((item, size, events))
        self.bytes += size
        self.events += events
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes
        self._wake_getter()

    def _wake_getter(self) -> None:
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)


class StuckClient:
    """Decides when a client that stopped reading is cut. Pure: times are passed in.

    The writer calls :meth:`sending` before each write and :meth:`sent` after it. While a
    write is pending, :meth:`observe` is told how many bytes the client's connection still
    holds unsent (when the server can tell); any fall in that number is the client draining,
    and restarts the count. A write pending ``timeout_ns`` with no drain seen is a stuck
    client. Checks come at most a quarter timeout apart, so a stuck client is cut between
    ``timeout`` and ``1.25 × timeout`` after its last drain.
    """

    __slots__ = ("_since", "_unsent", "timeout_ns")

    def __init__(self, timeout_ns: Nanos) -> None:
        if timeout_ns <= 0:
            raise ValueError("stuck_timeout must be positive")
        self.timeout_ns = timeout_ns
        self._since: Nanos | None = None
        self._unsent: int | None = None

    def sending(self, now: Nanos) -> None:
        self._since = now
        self._unsent = None

    def sent(self) -> None:
        self._since = None
        self._unsent = None

    def observe(self, now: Nanos, unsent: int | None) -> None:
        """The client's connection holds ``unsent`` bytes now (None: the server cannot tell)."""
        if self._since is None or unsent is None:
            return
        if self._unsent is not None and unsent < self._unsent:
            self._since = now  # it drained something since the last look: not stuck
        self._unsent = unsent

    def stuck(self, now: Nanos) -> bool:
        since = self._since
        return since is not None and now - since >= self.timeout_ns

    def next_check(self, now: Nanos) -> Nanos:
        quarter = now + max(1, self.timeout_ns // 4)
        since = self._since
        if since is not None:
            return min(since + self.timeout_ns, quarter)
        return quarter
