"""SSE ``id:`` lines on the events the gateway sends: the one place they are written.

An event's id is its decimal sequence number in its stream, from 1 (clients treat it as
opaque and monotonic). The line goes last in the event, just before the blank line that ends
it: SSE's last field wins, so an ``id:`` an upstream wrote itself cannot shadow ours. Pure
comments (``: keepalive``) are no events a client dispatches: they pass without an id, and
are not kept for replay.

The bytes handed here are whole events (the relay cuts at event boundaries), in any of the
line endings SSE allows; one regular-expression pass over a read finds their ends.
"""

from __future__ import annotations

import re

__all__ = ["stamp_events"]

# The blank line that ends an event: two line ends, each CRLF, LF or CR.
_EVENT_END = re.compile(rb"(\r\n|\r|\n)(?:\r\n|\r|\n)")
_COLON = 58  # ":": a line that starts with it is a comment


def stamp_events(data: bytes, next_id: int) -> tuple[bytes, list[bytes]]:
    """``data`` with an ``id:`` line in each event, numbered from ``next_id``; and the
    stamped events (the comments left out), in order.

    Bytes after the last event's end (none, from the relay) go on unstamped.
    """
    size = len(data)
    if (
        size > 2 and data[0] != _COLON and data.find(b"\n\n") == size - 2 and data.find(b"\r") < 0
    ):  # one event in LF lines (most reads of most upstreams): no scan
        event = b"%sid: %d\n\n" % (data[:-1], next_id)
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


def _is_comment(data: bytes, start: int, end: int) -> bool:
    """Whether the event in ``data[start:end]``, which starts with a comment line, has no
    field at all (nothing a client would dispatch)."""
    return all(not line or line[0] == _COLON for line in data[start:end].splitlines())
