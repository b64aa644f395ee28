"""The proxy-buffering finding on hand-built timelines: lumps, their share, both edges."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from steadystream import Timeline, Where
from steadystream.findings import Finding, find
from steadystream.metrics import MetricConfig, fleet_metrics, stream_metrics, stream_table
from tests.support.timelines import make_timeline

CADENCE_MS = 25.0


def steady(stream_id: str, events: int = 40, *, where: Where = Where.CLIENT) -> Timeline:
    """A stream delivered event by event: first token at 30 ms, then every 25 ms."""
    times = [30.0 + i * CADENCE_MS for i in range(events)]
    return make_timeline(times, stream_id=stream_id, where=where)


def buffered(
    stream_id: str, events: int = 40, *, lump: int = 8, where: Where = Where.CLIENT
) -> Timeline:
    """The same stream behind a buffer that lets ``lump`` events out at once, when full."""
    produced = [30.0 + i * CADENCE_MS for i in range(events)]
    times = [produced[min(i // lump * lump + lump - 1, events - 1)] for i in range(events)]
    # The role chunk waits in the buffer too: the first byte comes with the first lump.
    return make_timeline(times, stream_id=stream_id, where=where, role_ms=times[0])


def buffering(timelines: Sequence[Timeline]) -> Finding | None:
    config = MetricConfig()
    table = stream_table(timelines, config)
    found = find(table, fleet_metrics(table, config), config)
    matches = [f for f in found if f.code == "proxy-buffering"]
    return matches[0] if matches else None


def test_chunks_per_arrival_counts_events_that_came_together() -> None:
    assert stream_metrics(steady("a")).chunks_per_arrival == 1.0
    assert stream_metrics(buffered("b", 40, lump=8)).chunks_per_arrival == 8.0
    # 10 events in lumps of 4, 4 and 2: three arrivals.
    assert stream_metrics(buffered("c", 10, lump=4)).chunks_per_arrival == pytest.approx(10 / 3)
    # Events 0.9 ms apart arrived together; 1 ms apart are two arrivals: 10, 30 and 31.
    lumps = stream_metrics(make_timeline([10.0, 10.9, 30.0, 31.0]))
    assert lumps.chunks_per_arrival == pytest.approx(4 / 3)
    assert stream_metrics(make_timeline([], role_ms=0.0)).chunks_per_arrival is None


def test_a_run_behind_a_buffer_is_named() -> None:
    finding = buffering([buffered(f"s{i}") for i in range(6)])
    assert finding is not None
    assert finding.streams == 6
    assert "6 of 6 streams arrive in bursts" in finding.message
    assert "a median of 8 text events" in finding.message
    assert "proxy_buffering off" in finding.message
    assert "first byte" not in finding.message  # one edge only: no upstream to compare


def test_a_steady_run_and_a_mildly_coalesced_one_are_not() -> None:
    assert buffering([steady(f"s{i}") for i in range(6)]) is None
    # Network coalescing pairs events (2 per arrival): below the flag.
    assert buffering([buffered(f"s{i}", lump=2) for i in range(6)]) is None


def test_it_takes_most_streams() -> None:
    half = [buffered(f"b{i}") for i in range(3)] + [steady(f"s{i}") for i in range(3)]
    assert buffering(half) is not None
    few = [buffered(f"b{i}") for i in range(2)] + [steady(f"s{i}") for i in range(4)]
    assert buffering(few) is None


def test_short_streams_cannot_tell() -> None:
    # Six events in one lump: too short to tell a buffer from a fast answer.
    assert buffering([buffered(f"s{i}", 6, lump=6) for i in range(6)]) is None


def test_lumps_the_upstream_already_had_are_not_a_proxys() -> None:
    # The engine itself wrote in lumps (lab ground truth): the client saw what it was sent.
    run = []
    for i in range(4):
        run += [buffered(f"s{i}", where=Where.LAB), buffered(f"s{i}")]
    assert buffering(run) is None


def test_both_edges_say_how_late_the_first_byte_came() -> None:
    run = []
    for i in range(4):
        run += [steady(f"s{i}", where=Where.LAB), buffered(f"s{i}", lump=8)]
    finding = buffering(run)
    assert finding is not None
    assert finding.streams == 4  # stream ids, not rows
    assert "4 of 4 streams" in finding.message
    # The first lump leaves when the 8th event is produced: 7 cadences after the first token.
    assert "their first byte came 175.0ms after the upstream's first token" in finding.message
    assert "median of 4 streams recorded at both ends" in finding.message


def test_a_buffer_before_the_gateway_is_found_on_its_upstream_edge() -> None:
    # Lumps on the gateway's upstream edge and on the client: one proxy, before the gateway.
    run = []
    for i in range(4):
        run += [
            buffered(f"s{i}", where=Where.GATEWAY_UPSTREAM),
            buffered(f"s{i}", where=Where.GATEWAY_DOWNSTREAM),
            buffered(f"s{i}"),
        ]
    finding = buffering(run)
    assert finding is not None
    assert finding.streams == 4
