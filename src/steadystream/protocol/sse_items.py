"""What a stream of server-sent events is made of: events and comments (protocol/sse.py)."""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

__all__ = ["SseComment", "SseEvent", "SseItem"]


class SseEvent(NamedTuple):
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None
    wire_bytes: int = 0


class SseComment(NamedTuple):
    """One comment line (``: text``), as servers send for keepalives."""

    text: str
    wire_bytes: int = 0


SseItem: TypeAlias = SseEvent | SseComment
