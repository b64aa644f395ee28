"""QoE and fluidity a chunk a step equal them a token a step, and a stream that claims 2**31
tokens an event is measured in the memory of its events, not of its tokens."""

from __future__ import annotations

import contextlib
import resource
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadystream import Event, EventKind, Timeline, read_timelines, write_timelines
from steadystream.metrics import MetricConfig, _per_stream, stream_table
from tests.metrics_reference import _fluidity, _qoe, reference

MS = 1_000_000
_HUGE = 2**31 - 1

configs = st.builds(
    MetricConfig,
    qoe_expected_ttft_ns=st.sampled_from([100 * MS, 1000 * MS]),
    qoe_pace_ns_per_token=st.sampled_from([20 * MS, 100 * MS]),
    qoe_form=st.sampled_from(["exact", "discrete"]),
    fluidity_form=st.sampled_from(["documented", "code"]),
)


@st.composite
def chunky_timelines(draw: st.DrawFn, index: int = 0) -> Timeline:
    """Streams with chunks of many tokens, pieces of a token (text, 0 tokens) and reasoning."""
    n = draw(st.integers(0, 12))
    events, t = [], draw(st.integers(0, 1500)) * MS
    for _ in range(n):
        t += draw(st.sampled_from([0, 1, 20, 50, 120, 401, 2500])) * MS + draw(st.integers(0, 9))
        kind = draw(st.sampled_from([EventKind.CONTENT] * 4 + [EventKind.REASONING]))
        tokens = draw(st.sampled_from([0, 1, 2, 7, 40, 300]))
        events.append(Event(t, "ab" * max(tokens, 1), tokens, kind))
    return Timeline.from_events(events, stream_id=f"s{index}")


@contextlib.contextmanager
def chunk_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as patch:
        patch.setattr(_per_stream, "_EXPAND_TOKENS", 0)
        patch.setattr(_per_stream, "_EXPAND_PER_EVENT", 0)
        yield


def token_arrivals(timeline: Timeline) -> list[int]:
    """Each token the reader reads, at its chunk's arrival, a token at a time (a slow loop)."""
    answer = timeline.kinds != int(EventKind.REASONING)
    return [
        int(t)
        for t, n in zip(timeline.times[answer], timeline.tokens[answer], strict=True)
        for _ in range(n)
    ]


def same(a: float, b: float | None) -> bool:
    return (np.isnan(a) and b is None) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(chunky_timelines(), min_size=1, max_size=6), cfg=configs)
def test_chunk_steps_equal_token_steps_and_the_reference(
    runs: list[Timeline], cfg: MetricConfig
) -> None:
    by_token = stream_table(runs, cfg)
    with chunk_steps(pytest.MonkeyPatch()):
        by_chunk = stream_table(runs, cfg)
    for name in ("qoe", "fluidity"):
        np.testing.assert_array_equal(by_chunk.column(name), by_token.column(name))
        for i, timeline in enumerate(runs):
            got = float(by_chunk.column(name)[i])
            arrivals = token_arrivals(timeline)
            if not arrivals:  # no token the reader reads (the loop's 0/0)
                assert np.isnan(got)
                continue
            model = _qoe if name == "qoe" else _fluidity
            assert same(got, model(arrivals, cfg)), name


def test_a_piece_of_a_token_is_no_arrival_of_one() -> None:
    # Four text events holding four tokens, one of them a piece (text, no token): the
    # tokens arrive at 0.1 s, 2.9 s twice and 3 s, never at the piece's 1.5 s.
    with_piece = Timeline.from_events(
        [
            Event(100 * MS, "a", 1, EventKind.CONTENT),
            Event(1500 * MS, "b", 0, EventKind.CONTENT),
            Event(2900 * MS, "cd", 2, EventKind.CONTENT),
            Event(3000 * MS, "e", 1, EventKind.CONTENT),
        ],
        stream_id="piece",
    )
    table = stream_table([with_piece])
    expected = reference(with_piece, MetricConfig())
    assert same(float(table.column("qoe")[0]), expected["qoe"])
    assert same(float(table.column("fluidity")[0]), expected["fluidity"])


@contextlib.contextmanager
def address_space(extra_bytes: int) -> Iterator[None]:
    """At most ``extra_bytes`` more of address space: an allocation past it is a
    MemoryError here, never the machine's memory spent."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        pytest.skip("needs /proc to bound the address space")
    used = next(
        int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmSize:")
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (used + extra_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_a_timeline_file_claiming_2_31_tokens_an_event_is_measured_in_little_memory(
    tmp_path: Path,
) -> None:
    claimed = Timeline.from_events(
        [Event(t * 100 * MS, "a", _HUGE, EventKind.CONTENT) for t in (1, 2, 3)],
        stream_id="claims",
    )
    path = tmp_path / "claims.jsonl"
    write_timelines(path, [claimed])
    (read,) = read_timelines(path).timelines
    tracemalloc.start()
    try:
        with address_space(1 << 30):  # one token an entry would be 48 GiB
            table = stream_table([read])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    row = table.row(0)
    assert row.output_tokens == 3 * _HUGE
    # every token arrived long before a reader at 10 tokens/s would reach it: none is late
    assert row.qoe == 1.0
    assert row.fluidity == 1.0
