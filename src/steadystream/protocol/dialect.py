"""The dialect seam: what one event of a streamed answer is, whatever API it streams in.

A *dialect* is one wire shape of a token stream (OpenAI Chat Completions and Completions
today; the Responses API and Anthropic Messages next). Each reads the events the SSE cut
gives (:class:`~steadystream.protocol.sse.SseEvent`, :class:`~steadystream.protocol.sse.
SseComment`) and says what each one is in the shared kinds (:class:`Decoded`); everything
after it (the relay, the records, the watchdog, failover, metrics) sees only those.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from steadystream._types import EventKind
from steadystream.protocol.sse_items import SseItem

__all__ = ["Decoded", "Dialect"]


class Decoded(NamedTuple):
    """One event of a streamed answer as the timeline sees it.

    ``kind`` None is the dialect's end of the answer (``[DONE]``: not a timeline event);
    keepalives, pings and structural events are ``KEEPALIVE``, never tokens; ``ERROR``
    carries the upstream's in-band error in ``error``.
    """

    kind: EventKind | None
    text: str = ""
    usage: int = -1  # the running count of completion tokens it reports, -1: none
    finish: str | None = None  # the finish reason it gives, if any
    usage_counts: dict[str, Any] | None = None  # its usage object, as the upstream sent it
    finished: tuple[int, ...] = ()  # the choices its finish reasons end (n > 1)
    error: str | None = None


class Dialect(Protocol):
    """Reads one upstream's events; one per upstream response (it may keep state)."""

    @property
    def envelope(self) -> dict[str, Any] | None:
        """What a fallback's events must carry to fit this stream (the first chunk's id,
        model and creation time for chat), once an event gave it."""

    def decode(self, item: SseItem) -> Decoded:
        """What ``item`` is; raises :class:`~steadystream.ProtocolError` for a payload the
        dialect cannot read (an upstream's garbage, named in the message)."""
