"""Properties every pacer keeps, on drawn streams: nothing lost, nothing early, bounded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from steadystream import Timeline
from steadystream.shaping import Pacer, simulate_run
from steadystream.shaping.simulate import _Drive
from tests.support.shaping import PACER_STRATEGIES, live, timelines

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = sorted(PACER_STRATEGIES)


def _watermarks() -> st.SearchStrategy[tuple[int | None, int]]:
    bounded = st.integers(2, 60).flatmap(
        lambda high: st.tuples(st.just(high), st.integers(0, high - 1))
    )
    return st.one_of(st.just((None, 20)), st.just((50, 20)), bounded)


def _token_times(timeline: Timeline) -> np.ndarray:
    """The time of every paced token, in order."""
    mask = timeline.text_mask
    return np.repeat(timeline.times[mask], timeline.tokens[mask])


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data(), timeline=timelines())
def test_nothing_lost_duplicated_reordered_or_early(
    name: str, data: st.DataObject, timeline: Timeline
) -> None:
    pacer: Pacer = data.draw(PACER_STRATEGIES[name])
    high, low = data.draw(_watermarks())
    assume(high is None or pacer.max_unscheduled <= low)
    run = simulate_run(timeline, pacer, high_watermark=high, low_watermark=low)
    out = run.timeline
    # Same characters, same tokens, same kinds, in the same order.
    assert "".join(out.texts or []) == "".join(timeline.texts or [])
    assert np.array_equal(
        np.repeat(out.kinds, out.tokens), np.repeat(timeline.kinds, timeline.tokens)
    )
    unpaced_in = [
        (k, t)
        for k, t, p in zip(timeline.kinds, timeline.texts or [], ~timeline.text_mask, strict=True)
        if p
    ]
    unpaced_out = [
        (k, t) for k, t, p in zip(out.kinds, out.texts or [], ~out.text_mask, strict=True) if p
    ]
    assert unpaced_out == unpaced_in
    assert int(out.wire_bytes.sum()) == int(timeline.wire_bytes.sum())
    # Never earlier than it arrived; time never runs backwards.
    assert np.all(_token_times(out) >= _token_times(timeline))
    assert np.all(out.times[~out.text_mask] >= timeline.times[~timeline.text_mask])
    assert np.all(np.diff(out.times) >= 0)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data(), timeline=timelines())
def test_buffer_and_tail_delay_are_bounded(
    name: str, data: st.DataObject, timeline: Timeline
) -> None:
    pacer: Pacer = data.draw(PACER_STRATEGIES[name])
    high, low = data.draw(_watermarks())
    assume(high is None or pacer.max_unscheduled <= low)
    run = simulate_run(timeline, pacer, high_watermark=high, low_watermark=low)
    largest = int(timeline.tokens.max())
    if high is not None:
        # Below the high watermark before each arrival, so at most one event above it.
        assert run.max_buffered <= high - 1 + largest
    assert run.close_ns is not None
    # The source ends with its last event; only backpressure can make that be taken later.
    last_arrival = int(timeline.times[-1])
    assert run.close_ns == last_arrival if not run.paused else run.close_ns >= last_arrival
    token_times = _token_times(run.timeline)
    if len(token_times):
        # What was held at the end of input is out within the pacer's tail bound.
        assert int(token_times[-1]) <= run.close_ns + pacer.tail_ns


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), timeline=timelines(max_events=20))
def test_live_and_simulated_release_times_are_identical(
    name: str, data: st.DataObject, timeline: Timeline
) -> None:
    pacer: Pacer = data.draw(PACER_STRATEGIES[name])
    high, low = data.draw(_watermarks())
    assume(high is None or pacer.max_unscheduled <= low)
    simulated = simulate_run(timeline, pacer, high_watermark=high, low_watermark=low).timeline
    released = live(timeline, pacer.fresh(), high_watermark=high, low_watermark=low)
    assert [e.time_ns for e in released] == simulated.times.tolist()
    assert [e.text for e in released] == simulated.texts
    assert [e.tokens for e in released] == simulated.tokens.tolist()
    assert [int(e.kind) for e in released] == simulated.kinds.tolist()


@pytest.mark.parametrize("name", ["passthrough", "leaky", "reading", "adaptive", "flush"])
@SETTINGS
@given(data=st.data(), timeline=timelines())
def test_the_fast_simulation_releases_what_the_generic_one_does(
    name: str, data: st.DataObject, timeline: Timeline
) -> None:
    pacer: Pacer = data.draw(PACER_STRATEGIES[name])
    high, low = data.draw(_watermarks())
    arrivals = timeline.times.tolist()
    sizes = np.where(timeline.text_mask, timeline.tokens, 0).tolist()
    fast = pacer.fresh()._run_stream(arrivals, sizes, timeline.texts, high, low)
    generic = _Drive(pacer.fresh(), high, low)
    generic.run(arrivals, sizes, timeline.texts)
    if fast is None:  # only where backpressure pauses the read
        assert generic.pauses > 0
        return
    assert generic.pauses == 0
    assert fast.group_ends == generic.group_ends
    assert fast.group_times == generic.group_times
    assert fast.max_buffered == generic.max_buffered
