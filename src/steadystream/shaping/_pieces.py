"""How one event is cut into pieces when a pacer releases its tokens at different times.

A pacer releases tokens, not chunks: a chunk of five tokens may leave as five pieces. The text
and the wire bytes of the chunk are divided among the pieces by one rule, shared by the live
driver and the simulation so that both produce the same pieces:

- the pieces' token counts add up to the chunk's;
- the piece that covers tokens ``[i, j)`` of an ``n``-token chunk gets the characters between
  ``cut(i)`` and ``cut(j)``, so every character lands in exactly one piece, in order;
- ``cut`` prefers word boundaries: when the text has at least ``n`` words (a word being a run
  of non-space characters with the spaces before it), ``cut(i)`` is the start of word
  ``floor(i * words / n)``; otherwise the text is cut by characters, ``floor(i * length / n)``
  (a token is often a piece of a word anyway);
- wire bytes are divided the same way by count, ``floor(i * wire_bytes / n)``.

Pieces may have empty text (more tokens than characters); they still carry their tokens.
Pacers that coalesce (flush, rechunk) join the paced pieces of one kind that leave together
back into one event.
"""

from __future__ import annotations

import re

from steadystream._types import TEXT_KINDS, Event, Nanos

__all__ = ["Cuts", "Item", "byte_cut", "merge_paced", "text_cuts"]

_WORD = re.compile(r"\s*\S+")


def text_cuts(text: str, tokens: int) -> list[int]:
    """Character offsets ``cut(0) .. cut(tokens)`` for a text of ``tokens`` tokens."""
    cuts = Cuts(text, tokens)
    return [cuts[i] for i in range(tokens + 1)]


class Cuts:
    """``cut(i)`` of the rule above, computed on demand.

    A recorded event may claim far more tokens than its text has characters (up to 2**31 - 1):
    a list of every cut would then take gigabytes, while the pieces actually cut are few. The
    memory this takes is bounded by the text's length, never by the token count.
    """

    __slots__ = ("_length", "_starts", "_tokens", "_words")

    def __init__(self, text: str, tokens: int) -> None:
        self._length = len(text)
        self._tokens = max(tokens, 1)
        self._starts: list[int] | None = None
        self._words = 0
        if 1 < tokens <= self._length:  # more words than characters is impossible
            starts = [match.start() for match in _WORD.finditer(text)]
            if len(starts) >= tokens:
                starts[0] = 0  # leading spaces belong to the first word
                self._words = len(starts)
                starts.append(self._length)
                self._starts = starts

    def __getitem__(self, index: int) -> int:
        starts = self._starts
        if starts is not None:
            return starts[index * self._words // self._tokens]
        return index * self._length // self._tokens


def byte_cut(position: int, total_bytes: int, tokens: int) -> int:
    """Bytes before token ``position`` of a ``tokens``-token chunk of ``total_bytes`` bytes."""
    return position * total_bytes // tokens


class Item:
    """An event waiting in the pacer, with how many of its tokens have left."""

    __slots__ = ("cuts", "done", "event", "paced")

    def __init__(self, event: Event, paced: bool) -> None:
        self.event = event
        self.paced = paced
        self.done = 0
        self.cuts: Cuts | None = None

    @property
    def left(self) -> int:
        return self.event.tokens - self.done

    def take(self, now: Nanos, count: int) -> Event:
        event = self.event
        total = event.tokens
        start, end = self.done, self.done + count
        self.done = end
        if start == 0 and end == total:
            return event._replace(time_ns=now)
        if self.cuts is None:
            self.cuts = Cuts(event.text, total)
        wire = event.wire_bytes
        piece_wire = (
            None if wire is None else byte_cut(end, wire, total) - byte_cut(start, wire, total)
        )
        return Event(
            now, event.text[self.cuts[start] : self.cuts[end]], count, event.kind, piece_wire
        )


def merge_paced(pieces: list[Event]) -> list[Event]:
    """Join neighbouring paced pieces of one kind released together into one event."""
    merged: list[Event] = []
    for piece in pieces:
        if merged and _paced(piece) and _paced(merged[-1]) and merged[-1].kind == piece.kind:
            last = merged[-1]
            wire = (
                None
                if last.wire_bytes is None or piece.wire_bytes is None
                else last.wire_bytes + piece.wire_bytes
            )
            merged[-1] = Event(
                last.time_ns, last.text + piece.text, last.tokens + piece.tokens, last.kind, wire
            )
        else:
            merged.append(piece)
    return merged


def _paced(event: Event) -> bool:
    return event.tokens > 0 and event.kind in TEXT_KINDS
