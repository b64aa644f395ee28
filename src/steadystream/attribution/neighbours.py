"""The other streams in flight across each stall, asked all at once (pure; no I/O).

Whether a stall was one engine step stretched for everyone, and which part of it everyone
waited through, is read from the subject streams of the whole fleet on the wall clock:
:class:`Neighbours` joins every stall with the streams open over it
(:class:`~.inflight.SpanIndex`) and asks each whether it was silent where the stall was
(:class:`~.inflight.PackedTimes`), in whole-array passes. Also how the streams' first tokens
came (a held head is a server's policy when many streams show it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from steadystream.attribution.clocks import StreamClocks
from steadystream.attribution.inflight import NO, UNSURE, YES, PackedTimes, SpanIndex
from steadystream.attribution.streams import StreamView

__all__ = ["ALIGN_NS", "COMMON_SHARE", "HEAD_LUMP", "MAX_NEIGHBOURS", "Neighbours"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

HEAD_LUMP = 5  # text events released at once with the first token: a held head
HEAD_ALIKE_SPREAD = 0.2  # head lumps this close in size are one server's policy
ALIGN_NS = 10_000_000  # streams resuming this close together ended one and the same step
MAX_NEIGHBOURS = 64  # streams asked whether they paused with a stall (a sample beyond that)
COMMON_SHARE = 0.6  # share of the streams asked silent through a stretch: one stretched step


class Neighbours:
    """The subject streams on the wall clock, to ask which were in flight across stalls."""

    def __init__(self, clocks: StreamClocks) -> None:
        timed = np.flatnonzero(clocks.timed)
        self._rows = timed
        self._index = clocks.index[timed]
        walls = clocks.wall0[timed]
        self._sent = walls
        self._first = walls + clocks.times[clocks.offsets[timed]]
        self._last = walls + clocks.times[clocks.offsets[timed + 1] - 1]
        self._times = PackedTimes(clocks.offsets, clocks.times)
        self._spans: dict[bool, SpanIndex] = {}
        heads = len(clocks)
        lumped = int((clocks.head_lump >= HEAD_LUMP).sum())
        self.head_lump_share = lumped / heads if heads else 0.0  # of all, each asking one too
        self._heads_count, self._lumped_count = heads, lumped
        self._heads = np.sort(clocks.head_lump[clocks.head_lump >= HEAD_LUMP])

    def heads_alike(self, lump: int) -> int:
        """How many other streams' first tokens came in a lump within
        :data:`HEAD_ALIKE_SPREAD` of ``lump`` (the stream asking is one of the fleet's)."""
        if lump < HEAD_LUMP:
            return 0
        lo = np.searchsorted(self._heads, lump * (1 - HEAD_ALIKE_SPREAD), side="left")
        hi = np.searchsorted(self._heads, lump * (1 + HEAD_ALIKE_SPREAD), side="right")
        return max(int(hi - lo) - 1, 0)

    def other_heads_lumped(self, lump: int) -> tuple[float, int]:
        """The share of the other streams whose first token came in a lump, and how many
        others there are, asked by a stream whose own head lump is ``lump`` (the stream
        asking is one of the fleet's: its own lump says nothing of the server's policy)."""
        others = max(self._heads_count - 1, 0)
        lumped = max(self._lumped_count - (lump >= HEAD_LUMP), 0)
        return (lumped / others if others else 0.0), others

    @classmethod
    def of(cls, subjects: Sequence[StreamView]) -> Neighbours:
        return cls(StreamClocks.of(subjects))

    def stretched_share(
        self, stream: StreamView, start_ns: int, end_ns: int, *, first_token: bool
    ) -> tuple[float | None, int]:
        """:meth:`stretched_shares` of one stall."""
        share, count, _ = self.in_flight(
            np.array([stream.index]),
            np.array([start_ns]),
            np.array([end_ns]),
            np.array([first_token]),
        )
        return (None if np.isnan(share[0]) else float(share[0])), int(count[0])

    def stretched_shares(
        self, index: IntArray, start_ns: IntArray, end_ns: IntArray, first_token: BoolArray
    ) -> tuple[FloatArray, IntArray]:
        """:meth:`in_flight` without the common silence."""
        share, count, _ = self.in_flight(index, start_ns, end_ns, first_token)
        return share, count

    def in_flight(
        self, index: IntArray, start_ns: IntArray, end_ns: IntArray, first_token: BoolArray
    ) -> tuple[FloatArray, IntArray, IntArray]:
        """For each stall (of the stream numbered ``index[i]``, on the wall clock from
        ``start_ns[i]`` to ``end_ns[i]``): the share of the other streams in flight that
        paused with it (NaN: none to ask), and how many were asked. Paused with it: silent
        through the middle of the gap, and paused or resumed within :data:`ALIGN_NS` of it
        (one engine step, stretched for all; streams that pause each for its own reasons
        start and end at their own times). Before a first token, streams that were still
        waiting for theirs count too, and only the resumption can line up. Past
        :data:`MAX_NEIGHBOURS` streams in flight, an evenly spread sample of them is asked (as
        ``np.linspace`` picks them, in the order of the streams: a fixed sample keeps a
        100,000-stream run's cost bounded and the answer reproducible), found by rank
        without listing the rest (:meth:`~.inflight.SpanIndex.sample_over`).
        Third, the common silence (-1: none to ask): the longest stretch of the gap that
        :data:`COMMON_SHARE` of the streams asked were silent through, each its own longest
        (the part of the stall an engine step stretched for everyone; the rest is the
        stream's own). All stalls at once, as joins over the packed clocks (:mod:`.inflight`)."""
        stretched = np.zeros(len(index), dtype=np.int64)
        silences: list[tuple[IntArray, IntArray]] = []
        count = np.zeros(len(index), dtype=np.int64)
        quarter = (end_ns - start_ns) // 4
        lo, hi = start_ns + quarter, end_ns - quarter
        for first in (True, False):
            which = np.flatnonzero(first_token == first)
            if not len(which) or not len(self._rows):
                continue
            spans = self._span_index(first)
            for question, other in spans.sample_over(lo[which], hi[which], MAX_NEIGHBOURS):
                keep = self._index[other] != index[which[question]]
                question, other = question[keep], other[keep]
                at = which[question]
                said, asked, silence = self._paused_with(
                    other, start_ns[at], end_ns[at], lo[at], hi[at], first=first
                )
                if silence is not None:
                    silences.append((at[asked], silence[asked]))
                stretched += np.bincount(
                    at, weights=said.astype(np.float64), minlength=len(index)
                ).astype(np.int64)
                count += np.bincount(
                    at, weights=asked.astype(np.float64), minlength=len(index)
                ).astype(np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(count > 0, stretched / np.maximum(count, 1), np.nan)
        return share, count, _common(len(index), silences)

    def _span_index(self, first_token: bool) -> SpanIndex:
        if first_token not in self._spans:
            opened = self._sent if first_token else self._first
            self._spans[first_token] = SpanIndex(opened, self._last)
        return self._spans[first_token]

    def _paused_with(
        self,
        other: IntArray,
        start: IntArray,
        end: IntArray,
        lo: IntArray,
        hi: IntArray,
        *,
        first: bool,
    ) -> tuple[BoolArray, BoolArray, IntArray | None]:
        """Which of the (stall, other stream) pairs paused with the stall, which could tell
        (the other stream was open through the middle of the gap), and the other stream's
        longest silence within the gap (None before a first token)."""
        rows = self._rows[other]
        wall0 = self._sent[other]
        own = self._times.first[rows]
        opened = np.zeros(len(rows), dtype=np.int64) if first else own

        times = self._times
        counted: dict[tuple[int, str], IntArray] = {}

        def count(name: int, at: IntArray, side: str) -> IntArray:
            if (name, side) not in counted:
                counted[name, side] = times.count(rows, at - wall0, side=side)
            return counted[name, side]

        # Each edge of each window named, so that windows sharing an edge count it once.
        edges = {0: lo, 1: hi, 2: end - ALIGN_NS, 3: end + ALIGN_NS}
        if not first:
            edges |= {4: start - ALIGN_NS, 5: start + ALIGN_NS}

        def silent(a: int, b: int, since: IntArray) -> npt.NDArray[np.int8]:
            start_at, end_at = edges[a] - wall0, edges[b] - wall0
            upto, before = count(a, edges[a], "right"), count(b, edges[b], "left")
            return times.verdict(rows, start_at, end_at, since, upto, before)

        middle = silent(0, 1, opened)
        # Resumed with it: an event within ALIGN_NS of its end, and none between the middle
        # of the gap and that; paused with it: the mirror image at the other end.
        said = (silent(2, 3, opened) == NO) & (silent(0, 2, opened) == YES)
        if not first:
            said |= (silent(4, 5, own) == NO) & (silent(5, 1, own) == YES)
        # A wait for the first token is never split (docs/attribution.md#shares).
        silence = None if first else times.longest_silence(rows, start - wall0, end - wall0)
        return (middle == YES) & said, middle != UNSURE, silence


def _common(stalls: int, silences: Sequence[tuple[IntArray, IntArray]]) -> IntArray:
    """Per stall, the longest silence that :data:`COMMON_SHARE` of its asked streams reached
    (-1: none asked): sorted within each stall, the one that many from the top."""
    common = np.full(stalls, -1, dtype=np.int64)
    at = np.concatenate([np.zeros(0, dtype=np.int64), *(a for a, _ in silences)])
    length = np.concatenate([np.zeros(0, dtype=np.int64), *(s for _, s in silences)])
    if not len(at):
        return common
    order = np.lexsort((length, at))
    at, length = at[order], length[order]
    asked = np.bincount(at, minlength=stalls)
    first = np.cumsum(asked) - asked
    has = np.flatnonzero(asked)
    reach = np.ceil(COMMON_SHARE * asked[has]).astype(np.int64)
    common[has] = length[first[has] + asked[has] - reach]
    return common
