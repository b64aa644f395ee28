"""The streams' text events on the wall clock, packed: what a stall's neighbours are read from.

Whether a stall was one engine step stretched for everyone depends on every other stream in
flight, whichever file it was recorded in. :class:`StreamClocks` holds just that of each
stream (its start on the wall clock, its text events' offsets, how its first token came) in
a few flat arrays: cheap to send to another process, and exact to merge, file by file, into
the fleet's (pure; no I/O).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream.attribution.streams import StreamView, head_lumps

__all__ = ["StreamClocks"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class StreamClocks:
    """One row per stream with a text event, in the order of their ``index``.

    ``times[offsets[i]:offsets[i + 1]]`` are row ``i``'s text events (ns from its start);
    ``timed[i]`` says whether it has a wall clock (``wall0[i]`` is 0 where not).
    """

    index: IntArray  # the stream's position among all the timelines read
    wall0: IntArray
    timed: BoolArray
    head_lump: IntArray  # text events that came with the first one
    offsets: IntArray  # len(index) + 1
    times: IntArray

    @classmethod
    def of(cls, views: Sequence[StreamView]) -> StreamClocks:
        rows = [view for view in views if len(view.times)]
        lengths = np.array([len(view.times) for view in rows], dtype=np.int64)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        times = np.concatenate([np.zeros(0, dtype=np.int64), *(view.times for view in rows)])
        return cls(
            index=np.array([view.index for view in rows], dtype=np.int64),
            wall0=np.array([view.wall0_ns or 0 for view in rows], dtype=np.int64),
            timed=np.array([view.wall0_ns is not None for view in rows], dtype=np.bool_),
            head_lump=head_lumps(offsets, times),
            offsets=offsets,
            times=times,
        )

    def __len__(self) -> int:
        return len(self.index)

    def times_of(self, row: int) -> IntArray:
        return self.times[self.offsets[row] : self.offsets[row + 1]]

    def select(self, keep: BoolArray, *, shift: int = 0) -> StreamClocks:
        """The rows of the streams whose ``index`` is marked in ``keep`` (indexed by it),
        their indices moved by ``shift`` (a file's place among all the files' timelines)."""
        rows = keep[self.index] if len(self) else np.zeros(0, dtype=np.bool_)
        lengths = np.diff(self.offsets)
        events = np.repeat(rows, lengths)
        offsets = np.zeros(int(rows.sum()) + 1, dtype=np.int64)
        np.cumsum(lengths[rows], out=offsets[1:])
        return StreamClocks(
            index=self.index[rows] + shift,
            wall0=self.wall0[rows],
            timed=self.timed[rows],
            head_lump=self.head_lump[rows],
            offsets=offsets,
            times=self.times[events],
        )

    @classmethod
    def concat(cls, parts: Sequence[StreamClocks]) -> StreamClocks:
        """The parts' rows one after the other (give them in the order of their indices)."""
        ends = np.cumsum([0, *(int(p.offsets[-1]) for p in parts)], dtype=np.int64)[:-1]
        offsets = [np.zeros(1, dtype=np.int64)]
        offsets += [p.offsets[1:] + end for p, end in zip(parts, ends, strict=True)]
        return cls(
            index=np.concatenate([np.zeros(0, dtype=np.int64), *(p.index for p in parts)]),
            wall0=np.concatenate([np.zeros(0, dtype=np.int64), *(p.wall0 for p in parts)]),
            timed=np.concatenate([np.zeros(0, dtype=np.bool_), *(p.timed for p in parts)]),
            head_lump=np.concatenate([np.zeros(0, dtype=np.int64), *(p.head_lump for p in parts)]),
            offsets=np.concatenate(offsets),
            times=np.concatenate([np.zeros(0, dtype=np.int64), *(p.times for p in parts)]),
        )
