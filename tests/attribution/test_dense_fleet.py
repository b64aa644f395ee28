"""A fleet all in flight at once: the sample of streams asked per stall is found by rank, not by
listing every (stall, stream in flight) pair first; the same streams as the listing picked."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from steadystream import Timeline
from steadystream.attribution import explain
from steadystream.attribution import inflight as inflight_module
from steadystream.attribution import neighbours as neighbours_module
from steadystream.attribution.clocks import StreamClocks
from steadystream.attribution.inflight import SpanIndex
from steadystream.attribution.neighbours import MAX_NEIGHBOURS, Neighbours
from steadystream.attribution.streams import find_all_stalls, stream_views
from tests.support.attribution import stream

IntArray = npt.NDArray[np.int64]


def listed_then_sampled(
    opened: IntArray, closed: IntArray, lo: IntArray, hi: IntArray, most: int
) -> Iterator[tuple[IntArray, IntArray]]:
    """The enumeration as it was: every (question, stream open over it) pair, sorted by
    question then stream, then ``most`` of each question's evenly spread."""
    duration = np.maximum(closed - opened, 1)
    kind = np.floor(np.log2(duration.astype(np.float64))).astype(np.int64)
    questions, streams = [], []
    for k in np.unique(kind).tolist():
        members = np.flatnonzero(kind == k)
        members = members[np.argsort(opened[members], kind="stable")]
        starts = opened[members]
        longest = int((closed[members] - opened[members]).max())
        a = np.searchsorted(starts, hi - longest, side="left")
        b = np.searchsorted(starts, lo, side="right")
        lengths = np.maximum(b - a, 0)
        q = np.repeat(np.arange(len(lo), dtype=np.int64), lengths)
        at = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths - a, lengths)
        picked = members[at]
        keep = closed[picked] >= hi[q]
        questions.append(q[keep])
        streams.append(picked[keep])
    question = np.concatenate([np.zeros(0, dtype=np.int64), *questions])
    other = np.concatenate([np.zeros(0, dtype=np.int64), *streams])
    order = np.lexsort((other, question))
    question, other = question[order], other[order]
    sizes = np.bincount(question, minlength=len(lo))
    keep = np.ones(len(question), dtype=np.bool_)
    starts = np.cumsum(sizes) - sizes
    for i in np.flatnonzero(sizes > most).tolist():
        keep[starts[i] : starts[i] + sizes[i]] = False
        step = (sizes[i] - 1) / (most - 1)
        picks = np.arange(most, dtype=np.float64) * step
        picks[-1] = sizes[i] - 1
        keep[starts[i] + picks.astype(np.int64)] = True
    yield question[keep], other[keep]


def joined(batches: Iterator[tuple[IntArray, IntArray]]) -> tuple[IntArray, IntArray]:
    parts = list(batches)
    return (
        np.concatenate([np.zeros(0, dtype=np.int64), *(q for q, _ in parts)]),
        np.concatenate([np.zeros(0, dtype=np.int64), *(s for _, s in parts)]),
    )


def spans(rng: np.random.Generator, streams: int) -> tuple[IntArray, IntArray]:
    """Streams mostly all in flight at once, some short (wholly inside a stall), ties."""
    opened = rng.integers(0, 50, size=streams) * 1_000
    duration = rng.choice([0, 1, 2, 500, 30_000, 900_000, 1_000_000], size=streams)
    duration = np.where(rng.random(streams) < 0.5, duration, rng.integers(0, 2_000_000, streams))
    return opened.astype(np.int64), (opened + duration).astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("batch", [1 << 21, 97])
def test_sample_is_the_listings_sample(
    seed: int, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflight_module, "PAIR_BATCH", batch)
    rng = np.random.default_rng(seed)
    streams = int(rng.choice([1, 2, 64, 65, 300, 2_000]))
    opened, closed = spans(rng, streams)
    stalls = 400
    lo = rng.integers(-10_000, 1_200_000, size=stalls).astype(np.int64)
    hi = lo + rng.choice([0, 1, 400, 40_000, 600_000], size=stalls)
    most = int(rng.choice([2, 3, MAX_NEIGHBOURS]))
    expected = joined(listed_then_sampled(opened, closed, lo, hi, most))
    got = joined(SpanIndex(opened, closed).sample_over(lo, hi, most))
    assert np.array_equal(got[0], expected[0])
    assert np.array_equal(got[1], expected[1])


def dense(seed: int, streams: int) -> list[Timeline]:
    """Short streams all sent within 20 ms, half with one stall; a few streams short enough
    to come and go inside another's stall."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(streams):
        steps = rng.uniform(20, 30, size=int(rng.integers(3, 14)))
        if rng.random() < 0.5:
            steps[len(steps) // 2] += rng.uniform(500, 800)
        start = float(rng.uniform(0, 20)) if rng.random() < 0.9 else float(rng.uniform(0, 900))
        out.append(stream(list(40 + np.cumsum(steps)), stream_id=f"d{i}", start_ms=start))
    return out


def in_flight_of(timelines: list[Timeline]) -> tuple[Neighbours, tuple[IntArray, ...]]:
    views = stream_views(timelines, list(range(len(timelines))))
    neighbours = Neighbours(StreamClocks.of(views))
    sites = [s for s in find_all_stalls(views, 400_000_000) if s.stream.wall0_ns is not None]
    wall = np.array([s.stream.wall0_ns for s in sites], dtype=np.int64)
    return neighbours, (
        np.array([s.stream.index for s in sites], dtype=np.int64),
        wall + np.array([s.start_ns for s in sites], dtype=np.int64),
        wall + np.array([s.end_ns for s in sites], dtype=np.int64),
        np.array([s.first_token for s in sites], dtype=np.bool_),
    )


class Listed(SpanIndex):
    """The span index as it was: every pair listed, then the sample taken."""

    def __init__(self, opened: IntArray, closed: IntArray) -> None:
        super().__init__(opened, closed)
        self.spans = (opened, closed)

    def sample_over(
        self, lo: IntArray, hi: IntArray, most: int
    ) -> Iterator[tuple[IntArray, IntArray]]:
        return listed_then_sampled(*self.spans, lo, hi, most)


@pytest.mark.parametrize("seed", range(4))
def test_verdicts_and_shares_are_the_listings(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    timelines = dense(seed, 300)
    neighbours, (index, start, end, first) = in_flight_of(timelines)
    assert len(index) > 100
    got = neighbours.in_flight(index, start, end, first)
    before = explain(timelines)
    monkeypatch.setattr(neighbours_module, "SpanIndex", Listed)
    listed, _ = in_flight_of(timelines)
    expected = listed.in_flight(index, start, end, first)
    assert (got[1] >= MAX_NEIGHBOURS - 1).any()  # sampled
    for mine, theirs in zip(got, expected, strict=True):
        assert np.array_equal(mine, theirs, equal_nan=True)
    assert explain(timelines) == before


def test_nothing_is_stalls_times_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 streams all in flight across each of 2,000 intervals: 40 million pairs, of
    which 64 per interval are asked. What is built goes with the sample, not the pairs."""
    streams, stalls = 20_000, 2_000
    rng = np.random.default_rng(7)
    opened = rng.integers(0, 1_000, size=streams).astype(np.int64)
    closed = opened + rng.integers(2_000_000, 3_000_000, size=streams)
    lo = rng.integers(10_000, 1_000_000, size=stalls).astype(np.int64)
    hi = lo + rng.integers(0, 500_000, size=stalls)
    index = SpanIndex(opened, closed)
    built: list[int] = []
    real = inflight_module._select

    def select(rank: IntArray, *args: object) -> IntArray:
        built.append(len(rank))
        return real(rank, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(inflight_module, "_select", select)
    tracemalloc.start()
    try:
        batches = list(index.sample_over(lo, hi, MAX_NEIGHBOURS))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(built) == stalls * MAX_NEIGHBOURS  # one rank per stream asked, no more
    assert [len(q) for q, _ in batches] == built
    assert sum(len(s) for _, s in batches) == stalls * MAX_NEIGHBOURS
    sample = stalls * MAX_NEIGHBOURS * 8  # one int64 per stream asked: 1 MB
    assert peak < 24 * sample  # the pairs in flight would be 320 MB
