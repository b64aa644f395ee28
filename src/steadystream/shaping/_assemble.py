"""The paced timeline, built from what a simulated pacer released and when.

The simulation records, per stream, when each event was pushed into the pacer and each
release (how many paced tokens had left after it, and when). From that, with whole-array
operations: a paced event leaves with the release that takes its last token, or is cut into
pieces when its tokens left in several releases (the rule in ``_pieces``); an unpaced event
leaves with the token before it, or on arrival if that was later; a coalescing pacer's
neighbouring events of one kind that left in the same release are joined.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream.shaping._pieces import Cuts
from steadystream.timeline import Timeline

__all__ = ["Releases", "assemble"]


@dataclass(frozen=True, slots=True)
class Releases:
    """What a driver recorded: push time per event; running paced total and time per release."""

    push_times: list[int]
    group_ends: list[int]
    group_times: list[int]


@dataclass(slots=True)
class _Columns:
    """Event columns of the paced stream, with each event's release group (-1: not paced)."""

    times: npt.NDArray[np.int64]
    tokens: npt.NDArray[np.int32]
    wire_bytes: npt.NDArray[np.int32]
    text_bytes: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.uint8]
    texts: list[str] | None
    groups: npt.NDArray[np.int64]


def assemble(
    timeline: Timeline, coalesce: bool, paced: npt.NDArray[np.bool_], releases: Releases
) -> Timeline:
    """The paced timeline from the push times and releases a driver recorded."""
    if not len(timeline):
        return timeline.replace(annotations={})
    push = np.asarray(releases.push_times, dtype=np.int64)
    group_ends = np.asarray(releases.group_ends, dtype=np.int64)
    group_times = np.asarray(releases.group_times, dtype=np.int64)
    sizes = np.where(paced, timeline.tokens, 0).astype(np.int64)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    times = push
    first = last = np.full(len(timeline), -1, dtype=np.int64)
    paced_ends = ends[paced]
    if len(group_ends) == len(paced_ends) and np.array_equal(group_ends, paced_ends):
        # The common case, one release per paced event: no search needed.
        first = last = np.cumsum(paced) - 1
        times = push.copy()
        times[paced] = group_times
        if not paced.all():
            # Unpaced events leave with the event before them, or on arrival if later.
            released = np.maximum.accumulate(np.where(paced, times, np.iinfo(np.int64).min))
            times = np.where(paced, times, np.maximum(push, released))
    elif len(group_ends):
        top = len(group_ends) - 1
        # Token position x leaves with the first group whose running total exceeds x.
        first = np.minimum(np.searchsorted(group_ends, starts, side="right"), top)
        last = np.minimum(np.searchsorted(group_ends, ends - 1, side="right"), top)
        before = np.minimum(np.searchsorted(group_ends, starts - 1, side="right"), top)
        # Unpaced events leave with the token before them, or on arrival if that was earlier.
        after_previous = np.where(starts > 0, np.maximum(push, group_times[before]), push)
        times = np.where(paced, group_times[last], after_previous)
    groups = np.where(paced, last, -1)
    split = paced & (first != last)
    if split.any():
        spans = (first, last)
        columns = _split(timeline, paced, split, starts, spans, group_ends, group_times, times)
    else:
        columns = _Columns(
            times,
            timeline.tokens,
            timeline.wire_bytes,
            timeline.text_bytes,
            timeline.kinds,
            timeline.texts,
            groups,
        )
    if coalesce:
        columns = _merge(columns)
    shift_first = int(columns.times[0] - timeline.times[0])
    shift_last = max(0, int(columns.times[-1] - timeline.times[-1]))
    first_byte = timeline.first_byte_ns
    end = timeline.end_ns
    return timeline.replace(
        times=columns.times,
        tokens=columns.tokens,
        wire_bytes=columns.wire_bytes,
        text_bytes=columns.text_bytes,
        kinds=columns.kinds,
        texts=columns.texts,
        first_byte_ns=None if first_byte is None else first_byte + max(0, shift_first),
        end_ns=None if end is None else end + shift_last,
        annotations={},
    )


def _split(
    timeline: Timeline,
    paced: npt.NDArray[np.bool_],
    split: npt.NDArray[np.bool_],
    starts: npt.NDArray[np.int64],
    spans: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
    group_ends: npt.NDArray[np.int64],
    group_times: npt.NDArray[np.int64],
    times: npt.NDArray[np.int64],
) -> _Columns:
    """Columns with every event whose tokens left in several groups cut into pieces."""
    first, last = spans
    pieces = np.where(split, last - first + 1, 1)
    item = np.repeat(np.arange(len(pieces)), pieces)
    offset = np.arange(len(item)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    is_split = split[item]
    group = np.where(is_split, first[item] + offset, np.where(paced, last, -1)[item])
    sizes = timeline.tokens[item].astype(np.int64)
    # Token range of each piece within its event (whole events: 0 .. size).
    item_start = starts[item]
    group_start = np.where(group > 0, group_ends[np.maximum(group - 1, 0)], 0)
    low = np.where(is_split, np.maximum(group_start, item_start) - item_start, 0)
    high = np.where(
        is_split, np.minimum(group_ends[np.maximum(group, 0)] - item_start, sizes), sizes
    )
    safe = np.maximum(sizes, 1)
    wire = timeline.wire_bytes[item].astype(np.int64)
    text_bytes = timeline.text_bytes[item].astype(np.int64)
    out_texts = None
    if timeline.texts is None:
        piece_text_bytes = high * text_bytes // safe - low * text_bytes // safe
    else:
        out_texts = _piece_texts(timeline.texts, item, is_split, low, high, sizes)
        piece_text_bytes = np.where(
            is_split, [len(t.encode()) for t in out_texts] if out_texts else 0, text_bytes
        )
    return _Columns(
        np.where(is_split, group_times[np.maximum(group, 0)], times[item]),
        (high - low).astype(np.int32),
        (high * wire // safe - low * wire // safe).astype(np.int32),
        np.asarray(piece_text_bytes, dtype=np.int32),
        timeline.kinds[item],
        out_texts,
        group,
    )


def _piece_texts(
    texts: list[str],
    item: npt.NDArray[np.int64],
    is_split: npt.NDArray[np.bool_],
    low: npt.NDArray[np.int64],
    high: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
) -> list[str]:
    out: list[str] = []
    cuts = Cuts("", 0)
    current = -1
    for index, whole, a, b, size in zip(
        item.tolist(), is_split.tolist(), low.tolist(), high.tolist(), sizes.tolist(), strict=True
    ):
        text = texts[index]
        if not whole:
            out.append(text)
            continue
        if index != current:
            cuts = Cuts(text, size)
            current = index
        out.append(text[cuts[a] : cuts[b]])
    return out


def _merge(columns: _Columns) -> _Columns:
    """Join neighbouring paced events of one kind released in the same group."""
    groups = columns.groups
    if len(groups) < 2:
        return columns
    joins = (
        (groups[1:] >= 0) & (groups[1:] == groups[:-1]) & (columns.kinds[1:] == columns.kinds[:-1])
    )
    if not joins.any():
        return columns
    heads = np.flatnonzero(np.concatenate(([True], ~joins)))
    texts = columns.texts
    merged_texts = None
    if texts is not None:
        bounds = [*heads.tolist(), len(groups)]
        merged_texts = ["".join(texts[a:b]) for a, b in itertools.pairwise(bounds)]
    return _Columns(
        columns.times[heads],
        np.add.reduceat(columns.tokens, heads).astype(np.int32),
        np.add.reduceat(columns.wire_bytes, heads).astype(np.int32),
        np.add.reduceat(columns.text_bytes, heads).astype(np.int32),
        columns.kinds[heads],
        merged_texts,
        groups[heads],
    )
