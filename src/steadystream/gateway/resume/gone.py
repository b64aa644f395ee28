"""Why the events a reader asked for are not kept: one class for both builds of the log."""

from __future__ import annotations

__all__ = ["StreamGone"]


class StreamGone(Exception):
    """The events a reader asked for are not kept (any more): ``reason`` says why, in a few
    words a client can act on (expired, too_large, evicted, unknown, unresumable)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
