"""Server-sent events: an incremental decoder and an encoder that follow the WHATWG rules.

Every streamed token of an OpenAI-compatible server crosses this module, on the load
generator's and the gateway's hot paths, so it is written by hand on bytes: the common case,
``data: {json}\\n\\n`` arriving whole in one read, costs one ``splitlines`` and a few slices.

Why not a library: the timing of an event is the timing of the read that completed it, so
the decoder must take reads exactly as the socket gave them (split anywhere: inside a UTF-8
character, inside a CRLF) and hand back what each read completed. It must also account for
every byte, so that envelope overhead (wire bytes per content byte) can be measured.

Decisions the specification leaves to us, or that callers need to know:

- ``SseEvent.id`` is the *last event ID* in force when the event was dispatched, as the spec
  defines it: it persists across events until an ``id`` field changes it. None until the
  stream sets one. An ``id`` field fills the spec's last event ID *buffer*;
  :attr:`SseDecoder.last_event_id` (the event source's last event ID string, what a
  reconnect sends) takes the buffer's value only when a blank line dispatches the block, as
  in the spec and the web-platform-tests ``eventsource`` cases. A block cut off before its
  blank line never changes it; a block without data still does (the spec sets the last event
  ID before it drops a block with an empty data buffer).
- ``SseEvent.retry`` is the last valid ``retry`` value received since the previous dispatched
  event (None if none came); :attr:`SseDecoder.retry` keeps the stream's current value.
  An empty ``retry`` value is ignored, as browsers do.
- A block that ends with an empty data buffer (``event: ping`` and a blank line, a lone
  ``id:`` or ``retry:``) is not dispatched, per spec. It is not surfaced as an item: its
  ``id`` and ``retry`` take effect and show on the next event, its event type is dropped,
  and its bytes count toward the next item's ``wire_bytes``.
- Comments are surfaced as :class:`SseComment` at the end of their line, so keepalives are
  stamped when they arrive; one leading space is stripped from the text, as from a value.
- ``wire_bytes`` of an item counts the bytes from the end of the previous item through the
  end of the line that made it (its blank line, for an event). Bytes that make no item (the
  blank line after a comment, an undispatched block, a BOM) count toward the next item, so
  the items' ``wire_bytes`` plus :attr:`SseDecoder.undispatched_bytes` always add up to the
  bytes fed. Only one thing depends on how the stream was split into reads: when a CRLF
  is split between two reads, the item is made at the CR (its time must not wait for the
  next read) and the LF counts toward the next item.
- At end of stream an unfinished event is discarded, per spec; :meth:`SseDecoder.close`
  keeps it in :attr:`SseDecoder.incomplete_event` so that callers can recognise a final
  ``data: [DONE]`` sent without its blank line, and :attr:`SseDecoder.in_event` tells a
  stream that was cut mid-event.
- Invalid UTF-8 decodes with U+FFFD replacement; the decoder never raises on content.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import steadystream.protocol._sse_py as _sse_py
from steadystream._build import twin
from steadystream.protocol.sse_items import SseComment, SseEvent, SseItem

__all__ = [
    "DONE",
    "SseComment",
    "SseDecoder",
    "SseEvent",
    "SseItem",
    "encode_comment",
    "encode_event",
    "new_decoder",
]

DONE = b"data: [DONE]\n\n"
"""The end-of-stream marker of OpenAI-compatible servers, encoded."""

_LINE_END = re.compile(rb"\r\n|\r|\n")

if TYPE_CHECKING:
    SseDecoder = _sse_py.SseDecoder
else:
    SseDecoder = twin(_sse_py).SseDecoder  # compiled where built (steadystream._build)


def new_decoder() -> _sse_py.SseDecoder:
    """A decoder of the build that runs now (``STEADYSTREAM_NATIVE``, per stream)."""
    decoder: _sse_py.SseDecoder = twin(_sse_py).SseDecoder()
    return decoder


# -- encoding -----------------------------------------------------------------------------------


def encode_event(
    data: str | bytes,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Encode one event, ending with its blank line.

    Multi-line data becomes one ``data:`` line per line; a decoder gives it back with each
    line end (CRLF, CR or LF) as LF. ``event`` and ``id`` must be single lines (and ``id``
    free of NUL, which decoders ignore); ``retry`` is milliseconds, not negative.
    """
    raw = data.encode() if isinstance(data, str) else data
    head = b""
    if event is not None:
        head += b"event: " + _single_line("event", event) + b"\n"
    if id is not None:
        if "\x00" in id:
            raise ValueError("id must not contain NUL: decoders ignore such an id")
        head += b"id: " + _single_line("id", id) + b"\n"
    if retry is not None:
        if retry < 0:
            raise ValueError(f"retry must be a non-negative number of milliseconds, not {retry}")
        head += b"retry: %d\n" % retry
    if b"\n" not in raw and b"\r" not in raw:
        return head + b"data: " + raw + b"\n\n"
    lines = _LINE_END.split(raw)
    return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def encode_comment(text: str = "") -> bytes:
    """Encode a comment (a keepalive) as its own block: ``: text`` and a blank line.

    The blank line keeps naive clients that split the stream on blank lines working; it
    means a comment must be written between events, never inside one.
    """
    if not text:
        return b":\n\n"
    return b": " + _single_line("comment", text) + b"\n\n"


def _single_line(name: str, value: str) -> bytes:
    if "\n" in value or "\r" in value:
        raise ValueError(f"{name} must be a single line, got {value!r}")
    return value.encode()
