"""Packed stream clocks: merged file by file, exactly the fleet's; the neighbours they make."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream import Timeline, Where
from steadystream.attribution.clocks import StreamClocks
from steadystream.attribution.evidence import Neighbours
from steadystream.attribution.streams import (
    StreamView,
    outer_ranks,
    stream_numbers,
    subjects_and_edges,
)
from tests.support.attribution import cadence, stream


def files() -> list[list[Timeline]]:
    """Three files: no wall clock, no text event, one id at two edges in two files, empty."""
    lumped = stream([30.0, 30.2, 30.4, 30.6, 30.8, 80.0], stream_id="lump")
    return [
        [
            stream([30.0, 55.0, 80.0, 700.0, 725.0], stream_id="a"),
            stream(cadence(30, 5), stream_id="clockless").replace(started_at=None),
            stream([], stream_id="silent"),
        ],
        [],
        [
            stream(cadence(28, 5), stream_id="a", where=Where.GATEWAY_UPSTREAM),
            lumped,
            stream([30.0, 55.0, 80.0, 702.0, 727.0], stream_id="c"),  # paused with "a"
        ],
    ]


def merged(parts: list[list[Timeline]]) -> StreamClocks:
    """As explain --ray merges them: each file's views, its subjects' rows, shifted."""
    numbers = iter(
        stream_numbers(
            [t.stream_id for part in parts for t in part],
            [t.where.value for part in parts for t in part],
            [f for f, part in enumerate(parts) for _ in part],
        )
    )
    views = [[StreamView.of(i, t, next(numbers)) for i, t in enumerate(part)] for part in parts]
    outer = outer_ranks(
        [v.stream for part in views for v in part], [v.rank for part in views for v in part]
    )
    shift, pieces = 0, []
    for part in views:
        keep = np.array([v.rank == outer[v.stream] for v in part], dtype=np.bool_)
        pieces.append(StreamClocks.of(part).select(keep, shift=shift))
        shift += len(part)
    return StreamClocks.concat(pieces)


def test_merged_file_by_file_is_the_fleets() -> None:
    parts = files()
    subjects, _ = subjects_and_edges([t for part in parts for t in part])
    whole, pieces = StreamClocks.of(subjects), merged(parts)
    for name in ("index", "wall0", "timed", "head_lump", "offsets", "times"):
        assert np.array_equal(getattr(pieces, name), getattr(whole, name)), name
    # the gateway edge of "a" is no subject; the silent stream has no row
    assert pieces.index.tolist() == [0, 1, 4, 5]
    assert pieces.timed.tolist() == [True, False, True, True]
    assert pieces.head_lump.tolist()[2] == 5
    assert np.array_equal(pieces.times_of(3), subjects[-1].times)


def test_nothing_merges_into_nothing() -> None:
    empty = StreamClocks.concat([])
    assert len(empty) == 0
    assert empty.offsets.tolist() == [0]
    none_kept = StreamClocks.of([]).select(np.zeros(0, dtype=np.bool_))
    assert len(none_kept) == 0
    assert Neighbours(empty).head_lump_share == 0.0


def test_neighbours_span_the_files_and_leave_the_stream_itself_out() -> None:
    parts = files()
    subjects, _ = subjects_and_edges([t for part in parts for t in part])
    a = subjects[0]
    gap = (a.wall(80_000_000) or 0, a.wall(700_000_000) or 0)
    # "c", in the third file, paused and resumed with "a": one stretched step for both
    assert Neighbours(merged(parts)).stretched_share(a, *gap, first_token=False) == (1.0, 1)
    # "a" alone is open across its gap, and is no neighbour of itself
    assert Neighbours(merged(parts[:1])).stretched_share(a, *gap, first_token=False) == (None, 0)
    assert Neighbours(merged(parts)).head_lump_share == pytest.approx(1 / 4)
