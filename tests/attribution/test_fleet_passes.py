"""The fleet-wide passes give what one stall at a time gives: checked against a per-stall
reference (the loop attribution ran before the passes) on random fleets."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream import Timeline
from steadystream.attribution import EngineSamples, explain
from steadystream.attribution import inflight as inflight_module
from steadystream.attribution.clocks import StreamClocks
from steadystream.attribution.evidence import ALIGN_NS, MAX_NEIGHBOURS, Neighbours
from steadystream.attribution.inflight import NO, UNSURE, YES, PackedTimes
from steadystream.attribution.streams import (
    StreamView,
    find_all_stalls,
    find_stalls,
    head_lumps,
    silent_between,
    stream_views,
    typical_arrivals,
)
from tests.support.attribution import MS, stream


def fleet(seed: int, streams: int, *, spread_ms: float = 40.0) -> list[Timeline]:
    """Streams started ``spread_ms`` apart, some in lumps, with pauses (some shared)."""
    rng = np.random.default_rng(seed)
    shared = rng.uniform(0, streams * spread_ms, size=max(1, streams // 20))
    out = []
    for i in range(streams):
        start = i * spread_ms
        steps = rng.choice([0.2, 25.0, 30.0], size=rng.integers(1, 60), p=[0.2, 0.5, 0.3])
        times = start + 300.0 * rng.random() + np.cumsum(steps)
        # One engine step stretched for all (those begun by then): everyone resumes together.
        for at in shared[shared > start]:
            after = times > at
            if after.any():
                times = np.where(after, at + 500.0 + times - times[after][0], times)
        if rng.random() < 0.3:
            times[len(times) // 2 :] += rng.uniform(300, 2000)
        timeline = stream(list(times - start), stream_id=f"s{i}", start_ms=start)
        out.append(timeline.replace(started_at=None) if rng.random() < 0.05 else timeline)
    return out


def reference_share(
    clocks: StreamClocks, stream: StreamView, start_ns: int, end_ns: int, first_token: bool
) -> tuple[float | None, int]:
    """The share of streams that paused with a stall, asked one stream at a time."""
    rows = np.flatnonzero(clocks.timed)
    sent = clocks.wall0[rows]
    first = sent + clocks.times[clocks.offsets[rows]]
    last = sent + clocks.times[clocks.offsets[rows + 1] - 1]
    quarter = (end_ns - start_ns) // 4
    lo, hi = start_ns + quarter, end_ns - quarter
    opened = sent if first_token else first
    candidates = np.flatnonzero((opened <= lo) & (last >= hi))
    if len(candidates) > MAX_NEIGHBOURS:
        candidates = candidates[np.linspace(0, len(candidates) - 1, MAX_NEIGHBOURS).astype(int)]
    stretched = count = 0
    for i in candidates:
        if clocks.index[rows[i]] == stream.index:
            continue
        times = clocks.times_of(int(rows[i]))

        def silent(
            a: int, b: int, from_request: bool, wall0: int = int(sent[i]), times: np.ndarray = times
        ) -> bool | None:
            return silent_between(wall0, times, a, b, from_request=from_request)

        verdict = silent(lo, hi, first_token)
        if verdict is None:
            continue
        count += 1
        if not verdict:
            continue
        resumed = (
            silent(end_ns - ALIGN_NS, end_ns + ALIGN_NS, first_token) is False
            and silent(lo, end_ns - ALIGN_NS, first_token) is True
        )
        paused = (
            not first_token
            and silent(start_ns - ALIGN_NS, start_ns + ALIGN_NS, False) is False
            and silent(start_ns + ALIGN_NS, hi, False) is True
        )
        stretched += resumed or paused
    return (stretched / count if count else None), count


@pytest.mark.parametrize(("seed", "streams", "spread_ms"), [(1, 40, 40.0), (2, 300, 5.0)])
def test_shares_of_all_stalls_at_once_are_each_stalls(
    seed: int, streams: int, spread_ms: float
) -> None:
    views = stream_views(fleet(seed, streams, spread_ms=spread_ms), list(range(streams)))
    clocks = StreamClocks.of(views)
    sites = [s for v in views if v.wall0_ns is not None for s in find_stalls(v, 100 * MS)]
    assert len(sites) > 50
    assert any(s.first_token for s in sites)
    wall = [site.stream.wall0_ns or 0 for site in sites]
    share, count = Neighbours(clocks).stretched_shares(
        np.array([s.stream.index for s in sites]),
        np.array([w + s.start_ns for w, s in zip(wall, sites, strict=True)]),
        np.array([w + s.end_ns for w, s in zip(wall, sites, strict=True)]),
        np.array([s.first_token for s in sites]),
    )
    expected = [
        reference_share(clocks, s.stream, w + s.start_ns, w + s.end_ns, s.first_token)
        for w, s in zip(wall, sites, strict=True)
    ]
    got = [(None if np.isnan(a) else float(a), int(b)) for a, b in zip(share, count, strict=True)]
    assert got == expected
    assert max(c for _, c in expected) >= MAX_NEIGHBOURS - 1 or streams < 100  # sampled
    assert any(s is not None and s > 0.5 for s, _ in expected)  # some paused together


def test_stalls_found_in_one_pass_are_each_streams() -> None:
    views = stream_views(fleet(3, 60), list(range(60)))
    for threshold in (1, 100 * MS, 400 * MS):
        each = [site for view in views for site in find_stalls(view, threshold)]
        assert find_all_stalls(views, threshold) == each
    assert find_all_stalls([], 1) == []


def test_arrivals_and_head_lumps_per_row() -> None:
    views = stream_views(fleet(4, 50), list(range(50)))
    rows = [v.times for v in views] + [np.zeros(0, dtype=np.int64)]
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    times = np.concatenate(rows).astype(np.int64)
    typical, heads = typical_arrivals(offsets, times), head_lumps(offsets, times)
    for i, row in enumerate(rows):
        sizes = np.diff(np.concatenate(([0], np.flatnonzero(np.diff(row) >= MS) + 1, [len(row)])))
        assert typical[i] == (float(np.median(sizes)) if len(row) else 1.0)
        assert heads[i] == (sizes[0] if len(row) else 0)
    assert typical[-1] == 1.0
    assert heads[-1] == 0


@pytest.mark.parametrize("room", [1 << 62, 3_000])  # one block of keys, or many
def test_packed_silence_is_silent_between(room: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflight_module, "_KEY_ROOM", room)
    rng = np.random.default_rng(5)
    rows = [np.sort(rng.integers(-50, 2_000, size=rng.integers(1, 12))) for _ in range(40)]
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    packed = PackedTimes(offsets, np.concatenate(rows).astype(np.int64))
    which = rng.integers(0, len(rows), size=3_000)
    start = rng.integers(-100, 2_100, size=3_000)
    end = start + rng.integers(-20, 600, size=3_000)
    from_request = rng.random(3_000) < 0.5
    opened = np.where(from_request, 0, [rows[r][0] for r in which])
    got = packed.silent(which, start, end, opened)
    code = {True: YES, False: NO, None: UNSURE}
    expected = [
        code[silent_between(0, rows[r], int(a), int(b), from_request=bool(f))]
        for r, a, b, f in zip(which, start, end, from_request, strict=True)
    ]
    assert got.tolist() == expected
    assert {YES, NO, UNSURE} <= set(expected)


def test_engine_windows_at_once_are_each_windows() -> None:
    rng = np.random.default_rng(6)
    times = np.sort(rng.uniform(0, 10, size=60))
    counter = np.cumsum(rng.integers(0, 3, size=60)).astype(np.float64)
    counter[30:] -= 20  # a reset
    counter[5] = np.nan
    gauge = rng.uniform(0, 8, size=60)
    gauge[10:14] = np.nan
    samples = EngineSamples(times, {"c_total": counter, "g": gauge})
    start = rng.uniform(-1, 11, size=400)
    end = start + rng.uniform(0, 2, size=400)
    for name, many, one in (
        ("c_total", samples.increases, samples.increase),
        ("g", samples.peaks, samples.peak),
        ("absent", samples.peaks, samples.peak),
        ("absent", samples.increases, samples.increase),
    ):
        got = many(name, start, end)
        expected = [one(name, float(a), float(b)) for a, b in zip(start, end, strict=True)]
        assert [None if np.isnan(g) else float(g) for g in got] == expected


def test_explain_of_a_large_fleet_matches_per_stall_evidence() -> None:
    """The whole pipeline: every stall's share and count as the per-stall reference says."""
    timelines = fleet(7, 200, spread_ms=8.0)
    done = explain(timelines, stall_threshold_ns=150 * MS)
    views = stream_views(timelines, list(range(len(timelines))))
    clocks = StreamClocks.of(views)
    by_id = {v.stream_id: v for v in views}
    timed = [s for s in done.stalls if s.started_at is not None]
    assert len(timed) > 100
    checked = 0
    for stall in timed:
        view = by_id[stall.stream_id]
        share, count = reference_share(
            clocks,
            view,
            (view.wall0_ns or 0) + stall.start_ns,
            (view.wall0_ns or 0) + stall.end_ns,
            stall.first_token,
        )
        if count and share is not None and share >= 0.6 and not stall.first_token:
            assert f"{share:.0%} of the {count} other streams" in stall.evidence
            checked += 1
    assert checked > 10


@pytest.mark.parametrize("room", [1 << 62, 3_000])
def test_longest_silence_in_a_window_is_each_rows(
    room: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflight_module, "_KEY_ROOM", room)
    rng = np.random.default_rng(8)
    rows = [np.sort(rng.integers(0, 2_000, size=rng.integers(1, 30))) for _ in range(40)]
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    packed = PackedTimes(offsets, np.concatenate(rows).astype(np.int64))
    which = rng.integers(0, len(rows), size=2_000)
    start = rng.integers(-100, 2_000, size=2_000)
    end = start + rng.integers(1, 900, size=2_000)
    got = packed.longest_silence(which, start, end).tolist()
    expected = []
    for r, a, b in zip(which, start, end, strict=True):
        inside = rows[r][(rows[r] > a) & (rows[r] < b)]
        marks = np.concatenate(([a], inside, [b]))
        expected.append(int(np.diff(marks).max()))
    assert got == expected
