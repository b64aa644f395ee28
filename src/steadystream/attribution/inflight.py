"""Which streams were in flight across which intervals, and silent in them: sorted-interval
joins over packed arrays, for every stall of a fleet at once (pure; no I/O).

Two questions, asked of many (stall, stream) pairs at a time:

- :class:`SpanIndex`: which streams were open over an interval (opened by its start, not
  ended before its end)? Streams are grouped by how long they last (powers of two), each
  group sorted by its opening: the streams of one group open over an interval opened at most
  that group's longest duration before its end, a window one ``searchsorted`` finds. The
  pairs come out in bounded batches of stalls.
- :class:`PackedTimes`: did a stream get a text event inside a window? Every stream's event
  times, shifted so that the whole array is sorted (each row's span after the one before),
  answer any number of (row, window) questions with two ``searchsorted`` calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["NO", "PAIR_BATCH", "UNSURE", "YES", "PackedTimes", "SpanIndex", "positions"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

YES, NO, UNSURE = 1, 0, -1  # silent_between's True, False and None, as an int8 array
PAIR_BATCH = 1 << 21  # (stall, stream) pairs looked at together: bounds the scratch arrays
_KEY_ROOM = 1 << 62  # shifted times stay under this (int64)
_SHIFT_ROWS = 4096  # rows shifted at once: bounds the scratch array


class PackedTimes:
    """Rows of sorted times, ``times[offsets[r]:offsets[r + 1]]``, none empty; kept as the
    shifted keys alone (the times are not held twice)."""

    def __init__(self, offsets: IntArray, times: IntArray) -> None:
        self.first = times[offsets[:-1]]
        self.last = times[offsets[1:] - 1]
        self._offsets = offsets
        self._blocks = _blocks(offsets, times)

    def silent(
        self, rows: IntArray, start: IntArray, end: IntArray, opened: IntArray
    ) -> npt.NDArray[np.int8]:
        """Per question: :data:`NO` when row ``rows[i]`` got an event strictly inside
        ``(start[i], end[i])``; else :data:`UNSURE` when it was not open across it (opened
        after ``start``, or its last event before ``end``); else :data:`YES`. Times are the
        rows' own, ``opened`` each row's opening on them (see ``streams.silent_between``)."""
        return self.verdict(
            rows,
            start,
            end,
            opened,
            self.count(rows, start, side="right"),
            self.count(rows, end, side="left"),
        )

    def verdict(
        self,
        rows: IntArray,
        start: IntArray,
        end: IntArray,
        opened: IntArray,
        upto_start: IntArray,
        before_end: IntArray,
    ) -> npt.NDArray[np.int8]:
        """:meth:`silent` from counts already made: ``count(rows, start, side="right")`` and
        ``count(rows, end, side="left")`` (windows that share an edge share its count)."""
        verdict = np.full(len(rows), YES, dtype=np.int8)
        verdict[(opened > start) | (self.last[rows] < end)] = UNSURE
        verdict[before_end > upto_start] = NO
        return verdict

    def count(self, rows: IntArray, at: IntArray, *, side: str) -> IntArray:
        """Events of each row at or before ``at`` (``side="right"``), or before it ("left")."""
        counts = np.empty(len(rows), dtype=np.int64)
        low, high = (-1, 0) if side == "right" else (0, 1)
        for block in self._blocks:
            mine = (rows >= block.lo) & (rows < block.hi)
            if not mine.any():
                continue
            r = rows[mine]
            first = self.first[r]
            key = block.base[r - block.lo] + np.clip(
                at[mine] - first, low, self.last[r] - first + high
            )
            # Sorted questions walk the keys once (numpy starts each search from the last).
            order = np.argsort(key)
            found = np.empty(len(key), dtype=np.int64)
            found[order] = np.searchsorted(block.keys, key[order], side=side)  # type: ignore[call-overload]
            counts[mine] = found + self._offsets[block.lo] - self._offsets[r]
        return counts

    def times_at(self, rows: IntArray, local: IntArray) -> IntArray:
        """The time of each row's event number ``local[i]`` (counted from the row's first)."""
        out = np.empty(len(rows), dtype=np.int64)
        at = self._offsets[rows] + local
        for block in self._blocks:
            mine = (rows >= block.lo) & (rows < block.hi)
            if mine.any():
                r = rows[mine]
                key = block.keys[at[mine] - self._offsets[block.lo]]
                out[mine] = key - block.base[r - block.lo] + self.first[r]
        return out

    def longest_silence(self, rows: IntArray, start: IntArray, end: IntArray) -> IntArray:
        """The longest stretch of ``(start[i], end[i])`` in which row ``rows[i]`` got no event:
        from the window's start to its first event in it, between two of them, or from the
        last to the window's end (the whole window when none came). The gaps between the
        events inside are read with one ``maximum.reduceat`` over each block's gaps."""
        after = self.count(rows, start, side="right")  # its first event after the start
        before = self.count(rows, end, side="left")  # ... and its last before the end
        longest = (end - start).astype(np.int64)
        inside = np.flatnonzero(before > after)
        if not len(inside):
            return longest
        r, a, b = rows[inside], after[inside], before[inside]
        edges = np.maximum(
            self.times_at(r, a) - start[inside], end[inside] - self.times_at(r, b - 1)
        )
        first = self._offsets[r] + a  # global index of the first event inside
        for block in self._blocks:
            mine = np.flatnonzero((r >= block.lo) & (r < block.hi) & (b - a > 1))
            if not len(mine):
                continue
            lo = first[mine] - self._offsets[block.lo]
            bounds = np.column_stack((lo, lo + (b - a)[mine] - 1)).ravel()
            widest = np.maximum.reduceat(block.gaps(), bounds)[::2]
            edges[mine] = np.maximum(edges[mine], widest)
        longest[inside] = edges
        return longest


def positions(starts: IntArray, sizes: IntArray) -> IntArray:
    """Every position ``starts[i] .. starts[i] + sizes[i] - 1``, one after the other."""
    shift: IntArray = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes)
    return np.arange(int(sizes.sum()), dtype=np.int64) + shift


@dataclass(frozen=True, slots=True)
class _Block:
    """Rows ``lo:hi`` with their times shifted into one sorted array (``keys``)."""

    lo: int
    hi: int
    base: IntArray  # each row's shift: where its first event lands
    keys: IntArray
    _gaps: list[IntArray] = field(default_factory=list)

    def gaps(self) -> IntArray:
        """``keys[j + 1] - keys[j]`` (a row's gaps, where both are of one row), and a 0 after
        them; made on first use."""
        if not self._gaps:
            gaps = np.zeros(len(self.keys), dtype=np.int64)
            np.subtract(self.keys[1:], self.keys[:-1], out=gaps[:-1])
            self._gaps.append(gaps)
        return self._gaps[0]


def _blocks(offsets: IntArray, times: IntArray) -> list[_Block]:
    rows = len(offsets) - 1
    first = times[offsets[:-1]]
    span = times[offsets[1:] - 1] - first + 1
    blocks, lo = [], 0
    # Summed in floats: spans of streams that last centuries would pass 64 bits as integers.
    # Rounding moves a block's end by a row at most, its keys staying far below 2**63.
    room = np.cumsum(span, dtype=np.float64)
    while lo < rows:
        used = float(room[lo - 1]) if lo else 0.0
        hi = int(np.searchsorted(room, used + _KEY_ROOM, side="left"))
        hi = max(hi, lo + 1)
        base = np.zeros(hi - lo, dtype=np.int64)
        np.cumsum(span[lo : hi - 1], out=base[1:])
        keys = times[offsets[lo] : offsets[hi]].copy()
        shift = base - first[lo:hi]
        for a in range(lo, hi, _SHIFT_ROWS):  # the shifts spelt out a slice at a time
            b = min(a + _SHIFT_ROWS, hi)
            at = slice(offsets[a] - offsets[lo], offsets[b] - offsets[lo])
            keys[at] += np.repeat(shift[a - lo : b - lo], np.diff(offsets[a : b + 1]))
        blocks.append(_Block(lo, hi, base, keys))
        lo = hi
    return blocks


class SpanIndex:
    """Streams open over ``[opened[i], closed[i]]``, to ask which were open over intervals."""

    def __init__(self, opened: IntArray, closed: IntArray) -> None:
        duration = np.maximum(closed - opened, 1)
        kind = np.floor(np.log2(duration.astype(np.float64))).astype(np.int64)
        self._groups: list[tuple[int, IntArray, IntArray]] = []
        for k in np.unique(kind).tolist():
            members = np.flatnonzero(kind == k)
            members = members[np.argsort(opened[members], kind="stable")]
            longest = int((closed[members] - opened[members]).max())
            self._groups.append((longest, members, opened[members]))
        self._closed = closed

    def open_over(
        self, lo: IntArray, hi: IntArray
    ) -> Iterator[tuple[IntArray, IntArray, IntArray]]:
        """Batches of ``(question, stream, sizes)``: every stream open over question ``i``'s
        interval ``[lo[i], hi[i]]`` (opened at or before ``lo``, closed at or after ``hi``),
        the pairs sorted by question then stream; ``sizes`` counts each question's streams
        (for the questions of the batch, ``question`` holding their numbers)."""
        windows = [
            (
                np.searchsorted(starts, hi - longest, side="left"),
                np.searchsorted(starts, lo, side="right"),
            )
            for longest, _, starts in self._groups
        ]
        load = np.zeros(len(lo), dtype=np.int64)
        for a, b in windows:
            load += np.maximum(b - a, 0)
        first = 0
        while first < len(lo):
            last = _batch_end(load, first, PAIR_BATCH)
            yield self._pairs(first, last, lo, hi, windows)
            first = last

    def _pairs(
        self,
        first: int,
        last: int,
        lo: IntArray,
        hi: IntArray,
        windows: list[tuple[IntArray, IntArray]],
    ) -> tuple[IntArray, IntArray, IntArray]:
        questions, streams = [], []
        for (_, members, _), (a, b) in zip(self._groups, windows, strict=True):
            a, b = a[first:last], b[first:last]
            q, at = _ranges(a, b)
            picked = members[at]
            keep = self._closed[picked] >= hi[q + first]
            questions.append(q[keep] + first)
            streams.append(picked[keep])
        question = np.concatenate([np.zeros(0, dtype=np.int64), *questions])
        stream = np.concatenate([np.zeros(0, dtype=np.int64), *streams])
        order = np.lexsort((stream, question))
        sizes = np.bincount(question - first, minlength=last - first).astype(np.int64)
        return question[order], stream[order], sizes


def _ranges(a: IntArray, b: IntArray) -> tuple[IntArray, IntArray]:
    """Every ``(i, j)`` with ``a[i] <= j < b[i]``, as two arrays."""
    lengths = np.maximum(b - a, 0)
    owner = np.repeat(np.arange(len(a), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    at = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts - a, lengths)
    return owner, at


def _batch_end(load: IntArray, first: int, budget: int) -> int:
    """The end of a batch from ``first`` whose loads sum to at most ``budget`` (one at least)."""
    total = np.cumsum(load[first:])
    return first + max(1, int(np.searchsorted(total, budget, side="right")))
