"""Which streams were in flight across which intervals, and silent in them: sorted-interval
joins over packed arrays, for every stall of a fleet at once (pure; no I/O).

Two questions, asked of many (stall, stream) pairs at a time:

- :class:`SpanIndex`: which streams were open over an interval (opened by its start, not
  ended before its end), a sample of them when many? Those opened by its start less those
  ended before its end, each a prefix of the streams sorted (by opening, by end), plus the
  few wholly inside it: the ``k``-th of them in the order of the streams' numbers is found
  by rank in a wavelet matrix of each prefix, so a stall costs its sample, not the streams
  in flight. The pairs come out in bounded batches of stalls.
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
        events inside are read with one ``maximum.reduceat`` over each block's gaps (the windows
        in the order of their starts: what lies between them is read once at most)."""
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
            # In the order of their starts, so that the stretches between two windows, which
            # reduceat reduces too, add up to the block's length at most.
            mine = mine[np.argsort(first[mine], kind="stable")]
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
    """Streams open over ``[opened[i], closed[i]]``, to ask which were open over intervals.

    The streams open over ``[lo, hi]`` are those opened by ``lo`` (a prefix of the streams in
    the order of their opening), less those closed before ``hi`` (a prefix in the order of
    their closing), plus those of the latter not among the former: the streams wholly inside
    ``(lo, hi)``, which are looked up one by one (streams grouped by how long they last, in
    powers of two, each group sorted by its opening: only those shorter than ``hi - lo``, and
    opened after ``lo``, a window one ``searchsorted`` finds). The two prefixes are held as
    :class:`_Ranked` (a wavelet matrix of the streams' numbers): the ``k``-th stream open
    over an interval, in the order of their numbers, is found in one pass per bit of those
    numbers, without listing the others.
    """

    def __init__(self, opened: IntArray, closed: IntArray) -> None:
        duration = np.maximum(closed - opened, 1)
        kind = np.floor(np.log2(duration.astype(np.float64))).astype(np.int64)
        self._groups: list[tuple[int, IntArray, IntArray]] = []
        for k in np.unique(kind).tolist():
            members = np.flatnonzero(kind == k)
            members = members[np.argsort(opened[members], kind="stable")]
            shortest = int((closed[members] - opened[members]).min())
            self._groups.append((shortest, members, opened[members]))
        self._closed = closed
        by_opening = np.argsort(opened, kind="stable")
        by_closing = np.argsort(closed, kind="stable")
        self._opened_sorted = opened[by_opening]
        self._closed_sorted = closed[by_closing]
        self._by_opening = _Ranked(by_opening)
        self._by_closing = _Ranked(by_closing)

    def sample_over(
        self, lo: IntArray, hi: IntArray, most: int
    ) -> Iterator[tuple[IntArray, IntArray]]:
        """Batches of ``(question, stream)`` pairs, sorted by question then stream: of the
        streams open over question ``i``'s interval ``[lo[i], hi[i]]`` (opened at or before
        ``lo``, closed at or after ``hi``), in the order of their numbers, all of them up to
        ``most`` (at least 2), else ``most`` of them evenly spread (the ranks ``np.linspace``
        picks: a fixed sample). Each is found by its rank, so a question costs its sample
        times the bits of a stream's number, plus the streams wholly inside its interval."""
        opened_by = np.searchsorted(self._opened_sorted, lo, side="right")
        closed_before = np.searchsorted(self._closed_sorted, hi, side="left")
        windows = [
            (
                np.searchsorted(starts, lo, side="right"),
                np.searchsorted(starts, hi - shortest, side="left"),
            )
            for shortest, _, starts in self._groups
        ]
        inside = np.zeros(len(lo), dtype=np.int64)  # at most this many wholly inside
        for a, b in windows:
            inside += np.maximum(b - a, 0)
        load = np.minimum(opened_by - closed_before + inside, most) + inside
        first = 0
        while first < len(lo):
            last = _batch_end(load, first, PAIR_BATCH)
            yield self._sample(first, last, lo, hi, windows, opened_by, closed_before, most)
            first = last

    def _sample(
        self,
        first: int,
        last: int,
        lo: IntArray,
        hi: IntArray,
        windows: list[tuple[IntArray, IntArray]],
        opened_by: IntArray,
        closed_before: IntArray,
        most: int,
    ) -> tuple[IntArray, IntArray]:
        # The streams wholly inside each interval, as sorted keys: question * n + stream.
        n = len(self._closed)
        keys = [np.zeros(0, dtype=np.int64)]
        for (_, members, _), (a, b) in zip(self._groups, windows, strict=True):
            q, at = _ranges(a[first:last], b[first:last])
            picked = members[at]
            keep = self._closed[picked] < hi[q + first]
            keys.append(q[keep] * n + picked[keep])
        wholly = np.sort(np.concatenate(keys))
        within = np.bincount(wholly // max(n, 1), minlength=last - first).astype(np.int64)
        sizes = opened_by[first:last] - closed_before[first:last] + within
        question, rank = _spread(sizes, most)
        stream = _select(
            rank,
            question * n,
            (self._by_opening, opened_by[first:last][question]),
            (self._by_closing, closed_before[first:last][question]),
            wholly,
        )
        return question + first, stream


class _Ranked:
    """A wavelet matrix of ``values`` (each in ``0 .. len(values) - 1``): per bit, top first,
    the values stably parted by that bit, and the zeros counted before each position (int32:
    half the memory), to count and select by value within any prefix of ``values``."""

    def __init__(self, values: IntArray) -> None:
        self.bits = max(int(len(values) - 1).bit_length(), 1)
        self.zeros = np.zeros((self.bits, len(values) + 1), dtype=np.int32)
        self.total = np.zeros(self.bits, dtype=np.int64)
        v = values
        for level in range(self.bits):
            one = ((v >> (self.bits - 1 - level)) & 1).astype(np.bool_)
            np.cumsum(~one, out=self.zeros[level, 1:])
            self.total[level] = self.zeros[level, -1]
            v = np.concatenate((v[~one], v[one]))


def _spread(sizes: IntArray, most: int) -> tuple[IntArray, IntArray]:
    """Per question, the ranks asked: all up to ``most``, else ``most`` evenly spread (as
    ``np.linspace(0, size - 1, most).astype(int)`` picks them)."""
    sizes = np.maximum(sizes, 0)
    taken = np.minimum(sizes, most)
    question = np.repeat(np.arange(len(sizes), dtype=np.int64), taken)
    rank = positions(np.zeros(len(sizes), dtype=np.int64), taken)
    many = np.flatnonzero(sizes > most)
    if len(many):
        step = (sizes[many] - 1) / (most - 1)
        picks = np.arange(most, dtype=np.float64)[None, :] * step[:, None]
        picks[:, -1] = sizes[many] - 1
        starts = (np.cumsum(taken) - taken)[many]
        rank[(starts[:, None] + np.arange(most)[None, :]).ravel()] = picks.astype(np.int64).ravel()
    return question, rank


def _select(
    rank: IntArray,
    base: IntArray,
    added: tuple[_Ranked, IntArray],
    taken: tuple[_Ranked, IntArray],
    extra: IntArray,
) -> IntArray:
    """The value of rank ``rank[i]`` (from 0, in value order) in the multiset: the first
    ``added[1][i]`` values of ``added[0]``, less the first ``taken[1][i]`` of ``taken[0]``
    (all among them, or in ``extra``), plus those of ``extra`` (sorted keys) from ``base[i]``
    on and below ``base[i] + len``. One pass per bit, top first, for all ranks at once."""
    plus, minus = added[0], taken[0]
    a_lo, a_hi = np.zeros(len(rank), dtype=np.int64), added[1].astype(np.int64)
    t_lo, t_hi = np.zeros(len(rank), dtype=np.int64), taken[1].astype(np.int64)
    k = rank.copy()
    value = np.zeros(len(rank), dtype=np.int64)
    e_lo = np.searchsorted(extra, base, side="left") if len(extra) else None
    for level in range(plus.bits):
        half = 1 << (plus.bits - 1 - level)
        zp, zm = plus.zeros[level], minus.zeros[level]
        za_lo, za_hi, zt_lo, zt_hi = zp[a_lo], zp[a_hi], zm[t_lo], zm[t_hi]
        zeros = (za_hi - za_lo) - (zt_hi - zt_lo)
        if e_lo is not None:
            e_mid = np.searchsorted(extra, base + value + half, side="left")
            zeros += e_mid - e_lo
        one = k >= zeros
        k -= np.where(one, zeros, 0)
        value += np.where(one, half, 0)
        a_lo = np.where(one, plus.total[level] + a_lo - za_lo, za_lo)
        a_hi = np.where(one, plus.total[level] + a_hi - za_hi, za_hi)
        t_lo = np.where(one, minus.total[level] + t_lo - zt_lo, zt_lo)
        t_hi = np.where(one, minus.total[level] + t_hi - zt_hi, zt_hi)
        if e_lo is not None:
            e_lo = np.where(one, e_mid, e_lo)
    return value


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
