"""Backpressure: the bounded buffer between the upstream reader and the client writer.

One reader puts, one writer gets. The buffer holds at most ``max_bytes`` (one item larger
than that is let in alone, so a big read never deadlocks) and ``max_items``; when full,
:meth:`StreamBuffer.put` waits, the reader stops reading, aiohttp's own bounded buffer fills
and TCP flow control slows the upstream. Per-stream memory is therefore bounded, and the
buffer measures its own peak.

:class:`StuckClient` is the pure rule for a client that stopped reading: a write that has
not completed for ``stuck_timeout`` means the client has drained nothing for that long.
"""

from __future__ import annotations

import asyncio
from collections import deque
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
        "max_bytes",
        "max_items",
        "peak_bytes",
        "waits",
    )

    def __init__(self, *, max_bytes: int, max_items: int) -> None:
        if max_bytes < 1 or max_items < 1:
            raise ValueError("a buffer holds at least one byte and one item")
        self.max_bytes = max_bytes
        self.max_items = max_items
        self._items: deque[tuple[T, int]] = deque()
        self._getter: asyncio.Future[None] | None = None
        self._putter: asyncio.Future[None] | None = None
        self._closed = False
        self.bytes = 0
        self.peak_bytes = 0
        self.waits = 0  # how often the reader had to wait: the client was slower

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def has_room(self, size: int) -> bool:
        items = self._items
        if not items:
            return True
        return len(items) < self.max_items and self.bytes + size <= self.max_bytes

    async def put(self, item: T, size: int) -> None:
        """Add ``item``, waiting while the buffer is full."""
        if self._closed:
            raise RuntimeError("put() on a closed buffer")
        if not self.has_room(size):
            self.waits += 1
            while not self.has_room(size):
                self._putter = asyncio.get_running_loop().create_future()
                try:
                    await self._putter
                finally:
                    self._putter = None
        self._add(item, size)

    def offer(self, item: T, size: int) -> bool:
        """Add ``item`` only if nothing is waiting to be written (keepalives use this)."""
        if self._closed or self._items:
            return False
        self._add(item, size)
        return True

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
        item, size = self._items.popleft()
        self.bytes -= size
        putter = self._putter
        if putter is not None and not putter.done():
            putter.set_result(None)
        return item

    def close(self) -> None:
        """No more items; :meth:`get` returns None once the rest is taken."""
        self._closed = True
        self._wake_getter()

    def _add(self, item: T, size: int) -> None:
        self._items.append((item, size))
        self.bytes += size
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes
        self._wake_getter()

    def _wake_getter(self) -> None:
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)


class StuckClient:
    """Decides when a client that stopped reading is cut. Pure: times are passed in.

    The writer calls :meth:`sending` before each write and :meth:`sent` after it. A write
    still pending ``timeout_ns`` after it began is a stuck client. With no write pending, the
    next check is a quarter timeout away, so a stuck client is cut between ``timeout`` and
    ``1.25 × timeout`` after its last drain.
    """

    __slots__ = ("_since", "timeout_ns")

    def __init__(self, timeout_ns: Nanos) -> None:
        if timeout_ns <= 0:
            raise ValueError("stuck_timeout must be positive")
        self.timeout_ns = timeout_ns
        self._since: Nanos | None = None

    def sending(self, now: Nanos) -> None:
        self._since = now

    def sent(self) -> None:
        self._since = None

    def stuck(self, now: Nanos) -> bool:
        since = self._since
        return since is not None and now - since >= self.timeout_ns

    def next_check(self, now: Nanos) -> Nanos:
        since = self._since
        if since is not None:
            return since + self.timeout_ns
        return now + max(1, self.timeout_ns // 4)
