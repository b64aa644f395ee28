"""The streams attribution reads and the stalls it explains (pure; no I/O).

A stream's text events are what a person sees; a stall is a gap between two of them above
the threshold, or a wait for the first one above it (the place says a lot: before the first
token, a pause is queueing or a held head). Each stream id may be recorded at several
vantage points; the one nearest the reader is the subject (what the user saw), the others
are evidence about where on the path a gap appeared.

Which timelines are the same stream (:func:`stream_numbers`): those of one id in one file, and
those of one id at different vantage points across files (a client's file and a gateway's).
An id that comes back at a vantage point in a later file is another stream (a rerun, or
another run that reuses its ids): it joins the other vantage points' timelines of the id that
are as many files in, so two runs given one after the other, each with its edges, pair up.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from steadystream._types import TokenSource, Where
from steadystream.metrics import ARRIVAL_WINDOW_NS
from steadystream.timeline import Timeline, is_text_event

__all__ = [
    "EDGE_RANK",
    "StallSite",
    "StreamView",
    "find_all_stalls",
    "find_stalls",
    "group_views",
    "outer_ranks",
    "silent_between",
    "stream_numbers",
    "stream_views",
    "subjects_and_edges",
    "vantage_rank",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_MAX_WALL_S = 9e9  # unix seconds whose ns fit in 64 bits (until the year 2255)
_BATCH_EVENTS = 1 << 20  # events packed at once when views are made: bounds the scratch arrays

EDGE_RANK = {
    Where.LAB: 0,
    Where.GATEWAY_UPSTREAM: 1,
    Where.GATEWAY_DOWNSTREAM: 2,
    Where.CLIENT: 3,
}
"""Vantage points from the engine outwards."""
_RANK_BY_NAME = {where.value: rank for where, rank in EDGE_RANK.items()}


@dataclass(frozen=True, slots=True, eq=False)
class StreamView:
    """One timeline's text events, with what the rules ask of a stream."""

    index: int  # position in the input
    stream: int  # which stream it is (its other vantage points share it): stream_numbers
    stream_id: str
    where: Where
    event_index: npt.NDArray[np.int32]  # each text event's index among the timeline's events
    times: IntArray  # ns from the stream's own start
    wall0_ns: int | None  # the stream's start on the wall clock, when recorded
    typical_arrival: float  # median text events per arrival (1: one at a time)
    tokens_per_chunk: float | None
    token_source: TokenSource

    @classmethod
    def of(cls, index: int, timeline: Timeline, stream: int = 0) -> StreamView:
        return stream_views([timeline], [stream], first_index=index)[0]

    @property
    def rank(self) -> int:
        return vantage_rank(self.where)

    def wall(self, offset_ns: int) -> int | None:
        return None if self.wall0_ns is None else self.wall0_ns + offset_ns

    def silent_between(
        self, wall_start_ns: int, wall_end_ns: int, *, from_request: bool = False
    ) -> bool | None:
        """Whether no text event came in the wall-clock window (see :func:`silent_between`)."""
        if self.wall0_ns is None:
            return None
        return silent_between(
            self.wall0_ns, self.times, wall_start_ns, wall_end_ns, from_request=from_request
        )

    def lump_after(self, position: int) -> int:
        """Text events that arrived together starting at ``position`` (1: it came alone)."""
        times = self.times
        end = position + 1
        while end < len(times) and times[end] - times[end - 1] < ARRIVAL_WINDOW_NS:
            end += 1
        return end - position


@dataclass(frozen=True, slots=True)
class StallSite:
    """Where a stall is: which stream, which text event ends it, and its span."""

    stream: StreamView
    position: int  # index of the ending event among the stream's text events
    start_ns: int
    end_ns: int

    @property
    def first_token(self) -> bool:
        return self.position == 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def event_index(self) -> int:
        return int(self.stream.event_index[self.position])


def subjects_and_edges(
    timelines: Sequence[Timeline], files: Sequence[int] | None = None
) -> tuple[list[StreamView], dict[int, list[StreamView]]]:
    """The subject of each stream (its vantage point nearest the reader), and every view of
    each stream, engine side first, by stream number. ``files`` is the file each timeline came
    from (all from one without it): see :func:`stream_numbers`. Two timelines of one stream
    at one vantage point (a rerun within a file) are both subjects."""
    streams = stream_numbers(
        [t.stream_id for t in timelines], [t.where.value for t in timelines], files
    )
    return group_views(stream_views(timelines, streams))


def group_views(
    views: Sequence[StreamView],
) -> tuple[list[StreamView], dict[int, list[StreamView]]]:
    """:func:`subjects_and_edges` of views already made, in the order of their ``index``."""
    by_stream: dict[int, list[StreamView]] = {}
    for view in views:
        by_stream.setdefault(view.stream, []).append(view)
    for group in by_stream.values():
        group.sort(key=lambda view: view.rank)
    outer = outer_ranks([view.stream for view in views], [view.rank for view in views])
    subjects = [view for view in views if view.rank == outer[view.stream]]
    return subjects, by_stream


def stream_numbers(
    ids: Sequence[str], wheres: Sequence[str], files: Sequence[int] | None = None
) -> list[int]:
    """Which stream each timeline is, numbered in order of first sight.

    Timelines of one id are one stream when they are in the same file (``files``: each
    timeline's file, in the order given; without it, all from one), or at different
    vantage points. Where an id comes
    back at a vantage point in a later file, that is the id's next stream: the k-th file to
    hold an id at one vantage point joins the k-th to hold it at each other.
    """
    last_file: dict[tuple[str, str], int] = {}
    repeat: dict[tuple[str, str], int] = {}
    numbers: dict[tuple[str, int], int] = {}
    streams = []
    in_files = files if files is not None else [0] * len(ids)
    for stream_id, where, file in zip(ids, wheres, in_files, strict=True):
        seen = (stream_id, where)
        if seen in last_file and last_file[seen] != file:
            repeat[seen] = repeat.get(seen, 0) + 1
        last_file[seen] = file
        streams.append(numbers.setdefault((stream_id, repeat.get(seen, 0)), len(numbers)))
    return streams


def vantage_rank(where: str) -> int:
    """A vantage point's place from the engine outwards (past the known ones: outermost)."""
    return _RANK_BY_NAME.get(where, len(EDGE_RANK))


def outer_ranks(streams: Iterable[int], ranks: Iterable[int]) -> dict[int, int]:
    """Each stream's vantage point nearest the reader: the rank its subjects have."""
    outer: dict[int, int] = {}
    for stream, rank in zip(streams, ranks, strict=True):
        if rank > outer.get(stream, -1):
            outer[stream] = rank
    return outer


def silent_between(
    wall0_ns: int,
    times: IntArray,
    wall_start_ns: int,
    wall_end_ns: int,
    *,
    from_request: bool = False,
) -> bool | None:
    """Whether a stream started at ``wall0_ns`` with text events at ``times`` (ns from its
    start) got none in the wall-clock window: False when one came; True when none did and the
    stream was open across the window; None when it has no text event, or got nothing in the
    window without being open across it (it had not begun, or had already ended), and so
    cannot say. Open means from its first text event on, or with ``from_request`` from its
    request on (a wait for the first token is a gap too).
    """
    if not len(times):
        return None
    start, end = wall_start_ns - wall0_ns, wall_end_ns - wall0_ns
    lo = int(times.searchsorted(start, side="right"))
    hi = int(times.searchsorted(end, side="left"))
    if hi > lo:
        return False  # it got something meanwhile, whether or not it was open throughout
    opened = 0 if from_request else times[0]
    if opened > start or times[-1] < end:
        return None
    return True


def find_stalls(stream: StreamView, threshold_ns: int) -> list[StallSite]:
    """Gaps above ``threshold_ns``: the wait for the first text event, and those after it."""
    times = stream.times
    if not len(times):
        return []
    sites = []
    if times[0] > threshold_ns:
        sites.append(StallSite(stream, 0, 0, int(times[0])))
    gaps = np.diff(times)
    for k in np.flatnonzero(gaps > threshold_ns):
        sites.append(StallSite(stream, int(k) + 1, int(times[k]), int(times[k + 1])))
    return sites


def find_all_stalls(streams: Sequence[StreamView], threshold_ns: int) -> list[StallSite]:
    """:func:`find_stalls` of every stream, in their order: whole-array passes over their
    times, a batch of streams at a time."""
    sites: list[StallSite] = []
    for first, last in _batches([len(s.times) for s in streams]):
        sites += _batch_stalls(streams[first:last], threshold_ns)
    return sites


def _batch_stalls(streams: Sequence[StreamView], threshold_ns: int) -> list[StallSite]:
    lengths = np.fromiter((len(s.times) for s in streams), dtype=np.int64, count=len(streams))
    offsets = np.zeros(len(streams) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    times = np.concatenate([np.zeros(0, dtype=np.int64), *(s.times for s in streams)])
    heads = offsets[:-1][lengths > 0]
    waits = heads[times[heads] > threshold_ns]
    gaps = np.zeros(len(times), dtype=np.int64)
    np.subtract(times[1:], times[:-1], out=gaps[1:])
    gaps[heads] = 0  # a row's first event ends no gap of this row
    ends = np.union1d(waits, np.flatnonzero(gaps > threshold_ns))
    owner = (np.searchsorted(offsets, ends, side="right") - 1).tolist()
    position = (ends - offsets[owner]).tolist()
    end_ns = times[ends].tolist()
    start_ns = np.where(np.isin(ends, waits), 0, times[np.maximum(ends - 1, 0)]).tolist()
    return [
        StallSite(streams[r], p, a, b)
        for r, p, a, b in zip(owner, position, start_ns, end_ns, strict=True)
    ]


def _batches(lengths: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Consecutive ``(first, last)`` runs of rows holding about :data:`_BATCH_EVENTS` events
    (one row at least): what is packed at once, so scratch arrays stay bounded."""
    first = 0
    while first < len(lengths):
        last, events = first, 0
        while last < len(lengths) and (last == first or events < _BATCH_EVENTS):
            events += lengths[last]
            last += 1
        yield first, last
        first = last


def stream_views(
    timelines: Sequence[Timeline], streams: Sequence[int], *, first_index: int = 0
) -> list[StreamView]:
    """A :class:`StreamView` of each timeline (``streams``: each one's stream number), its
    ``index`` counted from ``first_index``. Built in whole-array passes over batches of
    timelines: each view's arrays are slices of its batch's packed text events."""
    views: list[StreamView] = []
    for start, stop in _batches([len(t) for t in timelines]):
        views += _batch_views(timelines[start:stop], streams[start:stop], first_index + start)
    return views


def _batch_views(
    timelines: Sequence[Timeline], streams: Sequence[int], first_index: int
) -> list[StreamView]:
    empty = np.zeros(0, dtype=np.int64)
    lengths = np.fromiter((len(t) for t in timelines), dtype=np.int64, count=len(timelines))
    starts = np.zeros(len(timelines) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    kinds = np.concatenate([empty.astype(np.uint8), *(t.kinds for t in timelines)])
    tokens = np.concatenate([empty, *(t.tokens for t in timelines)])
    positions = np.flatnonzero(
        is_text_event(kinds, tokens, np.concatenate([empty, *(t.text_bytes for t in timelines)]))
    )
    del kinds
    times = np.concatenate([empty, *(t.times for t in timelines)])[positions].astype(np.int64)
    offsets = np.searchsorted(positions, starts).astype(np.int64)  # each row's text events
    rows = np.repeat(np.arange(len(timelines), dtype=np.int64), np.diff(offsets))
    event_index = (positions - starts[rows]).astype(np.int32)  # half the memory of int64
    summed = np.zeros(len(positions) + 1, dtype=np.int64)
    np.cumsum(tokens[positions], out=summed[1:])
    token_sums = (summed[offsets[1:]] - summed[offsets[:-1]]).tolist()
    typical = typical_arrivals(offsets, times).tolist()
    bounds = offsets.tolist()
    last = [int(times[b - 1]) if b > a else 0 for a, b in pairwise(bounds)]
    return [
        StreamView(
            index=first_index + i,
            stream=stream,
            stream_id=timeline.stream_id,
            where=timeline.where,
            event_index=event_index[bounds[i] : bounds[i + 1]],
            times=times[bounds[i] : bounds[i + 1]],
            wall0_ns=_wall_ns(timeline.started_at, last[i]),
            typical_arrival=typical[i],
            tokens_per_chunk=(
                token_sums[i] / (bounds[i + 1] - bounds[i]) if bounds[i + 1] > bounds[i] else None
            ),
            token_source=timeline.token_source,
        )
        for i, (timeline, stream) in enumerate(zip(timelines, streams, strict=True))
    ]


def arrival_starts(offsets: IntArray, times: IntArray) -> IntArray:
    """Where each arrival begins among packed text events (rows ``times[offsets[i]:offsets[i
    + 1]]``): a row's first event, and each event :data:`ARRIVAL_WINDOW_NS` or more after the
    one before it (closer ones came together); ``len(times)`` last."""
    new = np.ones(len(times), dtype=np.bool_)
    if len(times) > 1:
        new[1:] = np.diff(times) >= ARRIVAL_WINDOW_NS
    new[offsets[:-1][offsets[:-1] < len(times)]] = True
    return np.append(np.flatnonzero(new), len(times)).astype(np.int64)


def typical_arrivals(offsets: IntArray, times: IntArray) -> FloatArray:
    """Each row's median text events per arrival (1.0 for a row without text events), in one
    pass: arrival sizes sorted within rows, the middle one or two picked."""
    breaks = arrival_starts(offsets, times)
    sizes = np.diff(breaks)
    owner = np.searchsorted(offsets, breaks[:-1], side="right") - 1
    ordered = sizes[np.lexsort((sizes, owner))]
    first = np.searchsorted(owner, np.arange(len(offsets) - 1), side="left")
    count = np.diff(np.append(first, len(owner)))
    typical = np.ones(len(offsets) - 1, dtype=np.float64)
    has = count > 0
    low = ordered[first[has] + (count[has] - 1) // 2]
    high = ordered[first[has] + count[has] // 2]
    typical[has] = (low + high) / 2
    return typical


def head_lumps(offsets: IntArray, times: IntArray) -> IntArray:
    """Each row's text events that arrived with its first one (0 for a row without any): from
    a row's start to the next arrival's (:func:`arrival_starts`), a batch of rows at a time
    (about :data:`_BATCH_EVENTS` events), so the scratch arrays stay bounded."""
    lumps = np.zeros(len(offsets) - 1, dtype=np.int64)
    for first, last in _batches(np.diff(offsets).tolist()):
        base = int(offsets[first])
        rows = offsets[first : last + 1] - base
        breaks = arrival_starts(rows, times[base : int(offsets[last])])
        heads = rows[:-1]
        # A row with events starts an arrival; the next one begins after it (at the latest
        # where the batch ends). An empty row's start may be the batch's end: clipped.
        after = np.minimum(np.searchsorted(breaks, heads, side="right"), len(breaks) - 1)
        lumps[first:last] = np.where(rows[1:] > heads, breaks[after] - heads, 0)
    return lumps


def _wall_ns(started_at: float | None, last_ns: int = 0) -> int | None:
    """``started_at`` in ns; None (no wall clock: joined by id only) where it, or the stream's
    last text event (``last_ns`` after it) on the wall clock, is past what 64 bits hold."""
    if started_at is None or not abs(started_at) < _MAX_WALL_S:
        return None
    wall = round(started_at * 1e9)
    return wall if abs(wall + last_ns) < _MAX_WALL_S * 1e9 else None
