"""Shared type aliases and small enums, in one place (as Starlette's ``types.py``)."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = [
    "TEXT_KINDS",
    "VISIBLE_KINDS",
    "Event",
    "EventKind",
    "Int64Array",
    "Nanos",
    "Outcome",
    "TokenSource",
    "TokenStream",
    "Where",
]

Nanos: TypeAlias = int
"""Integer nanoseconds: a duration, or an offset from a stream's request-sent instant."""

Int64Array: TypeAlias = npt.NDArray[np.int64]


class EventKind(enum.IntEnum):
    """What one chunk event carries. The one-letter code is its name on disk."""

    ROLE = 0  # role-only first chunk: no text, not the first token
    CONTENT = 1
    REASONING = 2
    TOOL_CALL = 3
    USAGE = 4  # usage-only chunk (choices empty)
    KEEPALIVE = 5  # SSE comment or empty event
    ERROR = 6  # in-band error event
    EMPTY = 7  # a chunk with no text: empty delta, finish-only

    @property
    def code(self) -> str:
        return _KIND_CODES[self]

    @classmethod
    def from_code(cls, code: str) -> EventKind:
        return _CODE_KINDS[code]

    @property
    def carries_text(self) -> bool:
        return self in TEXT_KINDS


_KIND_CODES = {
    EventKind.ROLE: "r",
    EventKind.CONTENT: "c",
    EventKind.REASONING: "t",
    EventKind.TOOL_CALL: "f",
    EventKind.USAGE: "u",
    EventKind.KEEPALIVE: "k",
    EventKind.ERROR: "e",
    EventKind.EMPTY: "n",
}
_CODE_KINDS = {code: kind for kind, code in _KIND_CODES.items()}

TEXT_KINDS = frozenset({EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL})
"""Kinds whose events count as tokens the user sees: gaps are taken on these."""

VISIBLE_KINDS = frozenset({EventKind.CONTENT, EventKind.TOOL_CALL})
"""Text kinds of the answer itself: TTFT is the first of these (reasoning has its own, TTFR)."""


class Outcome(enum.StrEnum):
    """How a stream ended."""

    COMPLETE = "complete"
    CANCELLED = "cancelled"  # by the client
    CLIENT_STUCK = "client-stuck"  # the gateway cut a client that stopped reading
    FAILED_OVER = "failed-over"  # finished, but on a fallback upstream
    ERROR = "error"
    TRUNCATED = "truncated"  # ended without [DONE] or a finish reason


class Where(enum.StrEnum):
    """The vantage point that recorded a timeline."""

    CLIENT = "client"
    GATEWAY_UPSTREAM = "gateway-upstream"
    GATEWAY_DOWNSTREAM = "gateway-downstream"
    LAB = "lab"
    GLASS = "glass"  # a page's paints, posted by the glass probe (one event per frame)
    REPLAY = "replay"  # what the replay server wrote (its ground truth)


class TokenSource(enum.StrEnum):
    """Where a timeline's per-event token counts came from (every report says which)."""

    EXACT = "exact"  # the provider counted per chunk (usage per chunk, engine timings, lab)
    USAGE_ONE_PER_EVENT = "usage-one-per-event"  # final usage total == content events
    USAGE_PROPORTIONAL = "usage-proportional"  # final usage spread by text length
    USAGE_SHARED = "usage-shared"  # final usage below the text events: pieces share tokens
    MAX_TOKENS = "max-tokens"  # no usage, ended for length: the request's max_tokens
    ESTIMATED = "estimated"  # no usage at all: estimated from the text
    # Peers' result files (steadystream.files.peers) keep chunk times without their text:
    USAGE_EVEN = "usage-even"  # a total per request, spread evenly over the chunks
    UNKNOWN = "unknown"  # no count at all: one per chunk holds its place; token metrics None


class Event(NamedTuple):
    """One chunk event, as producers hand it to :meth:`Timeline.from_events`.

    ``wire_bytes`` is what the event cost on the wire (SSE framing and JSON included); when
    unknown it is left None and the timeline records 0.
    """

    time_ns: Nanos
    text: str
    tokens: int
    kind: EventKind = EventKind.CONTENT
    wire_bytes: int | None = None


TokenStream: TypeAlias = AsyncIterator[Event]
"""A live stream of events, as pacers and the gateway pass them along."""
