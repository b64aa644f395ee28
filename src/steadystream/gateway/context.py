"""What the parts of one stream share: the reader, the writers and the guard, never the relay.

A :class:`StreamContext` holds the few things they all touch (the clock, the bounded buffer,
the stuck-client rule, the record of both edges, what was committed, the envelope of the
first upstream's chunks, whether the answer went out whole) and nothing that decides: the
relay decides, the helpers (the line, the writers, the guard) do their one job and report
through this context or through callbacks they are given (STYLE.md 13). Each can so be
built and tested alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from steadystream._clock import Clock
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.events import Piece
from steadystream.gateway.failover import Progress
from steadystream.gateway.recording import StreamRecord

__all__ = ["EVENT_OVERHEAD_BYTES", "Out", "StreamContext"]

EVENT_OVERHEAD_BYTES = 192
"""What one event held costs beyond its bytes: its :class:`Piece` and its text as a str.

Measured with tracemalloc over typical chat chunks (about 200 bytes each): 192 bytes per
event. Counting it makes ``limits.buffer_bytes`` and the buffer-peak metric tell the memory
a slow client really holds, not half of it.
"""


class Out(NamedTuple):
    """What the reader hands the writer: bytes to send and the events they hold."""

    data: bytes
    pieces: list[Piece]

    @property
    def cost(self) -> int:
        """The memory it holds while it waits in the buffer (see EVENT_OVERHEAD_BYTES)."""
        return len(self.data) + EVENT_OVERHEAD_BYTES * len(self.pieces)


def _nothing() -> None:
    return None


class StreamContext:
    """The shared state of one stream (see the module docstring)."""

    __slots__ = (
        "answered",
        "buffer",
        "clock",
        "envelope",
        "progress",
        "record",
        "scrub",
        "stuck",
        "wake_guard",
    )

    def __init__(
        self,
        clock: Clock,
        record: StreamRecord,
        buffer: StreamBuffer[Out],
        stuck: StuckClient,
        *,
        scrub: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.clock = clock
        self.record = record
        self.buffer = buffer
        self.stuck = stuck
        self.progress = Progress()
        self.envelope: dict[str, Any] | None = None  # id, created, model of the first chunk
        self.answered = False  # [DONE] (or a refusal) went out: a disconnect is no cancel
        self.wake_guard: Callable[[], None] = _nothing  # a deadline may have moved closer
        self.scrub = scrub  # hides upstream keys in what goes to the client (None: no keys)
