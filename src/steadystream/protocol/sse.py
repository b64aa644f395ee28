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
from typing import NamedTuple, TypeAlias

__all__ = [
    "DONE",
    "SseComment",
    "SseDecoder",
    "SseEvent",
    "SseItem",
    "encode_comment",
    "encode_event",
]

DONE = b"data: [DONE]\n\n"
"""The end-of-stream marker of OpenAI-compatible servers, encoded."""

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


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


class SseDecoder:
    """Turns reads of an SSE byte stream into events and comments, as they complete.

    ``feed(data)`` returns the items that ``data`` completed (in order); ``close()`` ends the
    stream. Reads may be split anywhere.
    """

    __slots__ = (
        "_bom_checked",
        "_closed",
        "_data",
        "_event_type",
        "_id_buffer",
        "_in_block",
        "_incomplete",
        "_item_bytes",
        "_last_id",
        "_partial",
        "_retry",
        "_retry_since_dispatch",
        "_skip_lf",
    )

    def __init__(self) -> None:
        self._partial = bytearray()  # an unterminated line, waiting for its line end
        self._skip_lf = False  # the last read ended with CR: an LF opening the next is its pair
        self._bom_checked = False
        self._data: list[bytes] = []  # the data lines of the event being built
        self._event_type = b""
        self._in_block = False  # a field line arrived since the last blank line
        self._id_buffer: str | None = None  # the id fields parsed so far
        self._last_id: str | None = None  # the buffer as of the last dispatch
        self._retry: int | None = None
        self._retry_since_dispatch: int | None = None
        self._item_bytes = 0  # bytes of complete lines since the end of the last item
        self._closed = False
        self._incomplete: SseEvent | None = None

    # -- state callers may read -------------------------------------------------------------

    @property
    def last_event_id(self) -> str | None:
        """The stream's last event ID (what a reconnect would send as ``Last-Event-ID``).

        It changes when a blank line dispatches a block that set an id, never while the
        block is still being read, nor for a block the end of the stream cut off.
        """
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds the stream last asked for, if any."""
        return self._retry

    @property
    def undispatched_bytes(self) -> int:
        """Bytes fed since the end of the last item (after ``close()``: bytes left over)."""
        return self._item_bytes + len(self._partial)

    @property
    def in_event(self) -> bool:
        """True while part of an event is pending: an unterminated line or undispatched fields.

        After ``close()`` this says whether the stream was cut mid-event.
        """
        return bool(self._partial) or self._in_block

    @property
    def at_boundary(self) -> bool:
        """Nothing is pending: the next byte starts a new item, as at the start of a stream.

        Reads that start here and hold whole ``data:`` events may be cut without this
        decoder (the gateway's fast path); its state would be the same after them.
        """
        return (
            self._bom_checked
            and not self._partial
            and not self._in_block
            and not self._skip_lf
            and not self._item_bytes
            and not self._closed
        )

    def skipped_events(self) -> None:
        """Whole ``data:``-only events were cut past this decoder, at a boundary: as if fed.

        Their dispatch would only have cleared the retry a later event reports (at a
        boundary the last event ID is already up to date).
        """
        self._retry_since_dispatch = None

    @property
    def incomplete_event(self) -> SseEvent | None:
        """The event ``close()`` discarded: what it would have been had a blank line followed."""
        return self._incomplete

    @property
    def closed(self) -> bool:
        return self._closed

    # -- decoding -----------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[SseItem]:
        """Decode one read; return the items it completed."""
        if self._closed:
            raise RuntimeError("feed() after close(): the stream has ended")
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 0x0A:
                self._item_bytes += 1
                data = data[1:]
                if not data:
                    return []
        if not self._bom_checked:
            head = bytes(self._partial) + data
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._partial += data  # could still become a BOM: wait for more
                return []
            self._bom_checked = True
            self._partial.clear()
            data = head
            if head.startswith(_BOM):
                self._item_bytes += len(_BOM)
                data = head[len(_BOM) :]
        if b"\n" not in data and b"\r" not in data:
            # No line ends: keep it and wait, without rescanning (a long line in many small
            # reads must cost linear time).
            self._partial += data
            return []
        if self._partial:
            self._partial += data
            data = bytes(self._partial)
            self._partial.clear()
        lines = data.splitlines(keepends=True)  # bytes split on CRLF, CR and LF only
        last = lines[-1][-1]
        if last == 0x0D:
            self._skip_lf = True
        elif last != 0x0A:
            self._partial += lines.pop()
        return self._take_lines(lines)

    def close(self) -> list[SseItem]:
        """End the stream. An unfinished event is discarded (see :attr:`incomplete_event`).

        Returns the items the end of stream completes: always none under the SSE rules, a
        list for symmetry with :meth:`feed`. Calling it again does nothing.
        """
        if self._closed:
            return []
        self._closed = True
        self._skip_lf = False
        if not (self._partial or self._data):
            return []
        # Work out what a blank line would have dispatched on a copy: this decoder's
        # properties must describe the stream as it ended, and a field on an unterminated
        # line never takes effect.
        probe = SseDecoder()
        for name in SseDecoder.__slots__:  # a subclass's own slots would miss them
            setattr(probe, name, getattr(self, name))
        probe._data = list(self._data)
        if self._partial:
            probe._take_lines([bytes(self._partial)])
        if probe._data:
            self._incomplete = probe._event(self.undispatched_bytes)
        return []

    # -- internals ----------------------------------------------------------------------------

    def _take_lines(self, lines: list[bytes]) -> list[SseItem]:
        out: list[SseItem] = []
        for line in lines:
            self._item_bytes += len(line)
            body = line.rstrip(b"\r\n")  # only the terminator: a line holds no other CR/LF
            if not body:
                self._last_id = self._id_buffer
                if self._data:
                    out.append(self._event(self._item_bytes))
                    self._item_bytes = 0
                    self._data = []
                    self._retry_since_dispatch = None
                self._event_type = b""
                self._in_block = False
                continue
            name, _, value = body.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if not name:
                out.append(SseComment(value.decode("utf-8", "replace"), self._item_bytes))
                self._item_bytes = 0
                continue
            self._in_block = True
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event_type = value
            elif name == b"id":
                if b"\x00" not in value:
                    self._id_buffer = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                try:
                    retry = int(value)
                except ValueError:  # beyond Python's digit limit for int(): no sane delay
                    continue
                self._retry = self._retry_since_dispatch = retry
        return out

    def _event(self, wire_bytes: int) -> SseEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        return SseEvent(
            data.decode("utf-8", "replace"),
            self._event_type.decode("utf-8", "replace") if self._event_type else "message",
            self._id_buffer,
            self._retry_since_dispatch,
            wire_bytes,
        )


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
