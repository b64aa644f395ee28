"""The SSE cut: reads of a server-sent event stream into events and comments (protocol/sse.py).

The one SSE decoder of the project, on every upstream read of the gateway and every read of
the bench client. Written once, here, in Python; where the package was built with a
compiler it also runs compiled by Cython (``_sse_c``, its types in ``_sse_c.pxd``;
:mod:`steadystream._build`). The rules it follows are in :mod:`steadystream.protocol.sse`.
"""

from __future__ import annotations

from steadystream.protocol.sse_items import SseComment, SseEvent, SseItem

__all__ = ["SseDecoder"]

_BOM = b"\xef\xbb\xbf"
# Items are made as tuples of their class, every field given: a NamedTuple's own ``__new__``
# is a Python function, a call too many on every event of every stream.
_new = tuple.__new__


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
        if (
            data[-2:] == b"\n\n"
            and self._bom_checked
            and not self._skip_lf
            and not self._partial
            and not self._in_block
            and self._item_bytes == 0
            and b"\r" not in data
        ):
            events = self._whole_events(data)
            if events is not None:
                return events
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
        probe = self._copy()
        if self._partial:
            probe._take_lines([bytes(self._partial)])
        if probe._data:
            self._incomplete = probe._event(self.undispatched_bytes)
        return []

    # -- internals ----------------------------------------------------------------------------

    def _copy(self) -> SseDecoder:
        probe = SseDecoder()
        probe._partial = bytearray(self._partial)
        probe._skip_lf = self._skip_lf
        probe._bom_checked = self._bom_checked
        probe._data = list(self._data)
        probe._event_type = self._event_type
        probe._in_block = self._in_block
        probe._id_buffer = self._id_buffer
        probe._last_id = self._last_id
        probe._retry = self._retry
        probe._retry_since_dispatch = self._retry_since_dispatch
        probe._item_bytes = self._item_bytes
        probe._closed = self._closed
        probe._incomplete = self._incomplete
        return probe

    def _whole_events(self, data: bytes) -> list[SseItem] | None:
        """The read servers send: whole one-line ``data:`` events, at a boundary, LF only.

        The same items as the line-by-line path (tests/protocol/test_sse.py holds the two
        to it), without a pass per line; None, with nothing changed, for anything else.
        """
        segments = data.split(b"\n\n")
        segments.pop()  # (what follows the last blank line: nothing)
        for segment in segments:
            if segment[:5] != b"data:" or b"\n" in segment:
                return None  # a comment, another field, two lines, a blank line more
        out: list[SseItem] = []
        event_id = self._id_buffer
        for segment in segments:
            value = segment[6:] if segment[5:6] == b" " else segment[5:]
            data_text = value.decode("utf-8", "replace")
            out.append(
                _new(
                    SseEvent,
                    (data_text, "message", event_id, self._retry_since_dispatch, len(segment) + 2),
                )
            )
            self._retry_since_dispatch = None
        self._last_id = event_id
        return out

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
                if self._in_block:
                    # Inside an event: its bytes are the event's (the event goes on as it
                    # came, and its size counts them), never an item cut out of its middle.
                    continue
                comment = (value.decode("utf-8", "replace"), self._item_bytes)
                out.append(_new(SseComment, comment))
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
        return _new(
            SseEvent,
            (
                data.decode("utf-8", "replace"),
                self._event_type.decode("utf-8", "replace") if self._event_type else "message",
                self._id_buffer,
                self._retry_since_dispatch,
                wire_bytes,
            ),
        )
