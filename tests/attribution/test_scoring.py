"""Scoring against the lab's truth: the k-th text event of the same request, time-weighted."""

from __future__ import annotations

import pytest

from steadystream import Where
from steadystream.attribution import NO_CAUSE, explain, score
from tests.support.attribution import GAP, cadence, stream


def lab(stream_id: str, cause_at_10: str | None) -> object:
    causes: list[str | None] = [None] * 20
    causes[10] = cause_at_10
    return stream(cadence(20, 20), stream_id=stream_id, where=Where.LAB, cause=causes)


def test_right_and_wrong_weighted_by_stall_time() -> None:
    other = stream(
        [*GAP[:15], GAP[14] + 1000], stream_id="b", start_ms=5000
    )  # not in flight with a
    result = explain([stream(GAP, stream_id="a"), other])
    truth = [lab("a", "kv-preemption"), lab("b", "connection-hiccup")]
    scored = score(result, truth)  # type: ignore[arg-type]
    assert scored.seconds[("kv-preemption", "kv-preemption")] == pytest.approx(0.6)
    # b's second stall ends at text 15, which the lab charged to nothing
    assert scored.seconds[(NO_CAUSE, "kv-preemption")] == pytest.approx(1.0)
    assert scored.seconds[("connection-hiccup", "kv-preemption")] == pytest.approx(0.6)
    assert scored.no_cause_s == pytest.approx(1.0)
    assert scored.share_right == pytest.approx(0.6 / 1.2)  # what the lab made, "none" apart
    assert scored.true_causes == ["kv-preemption", "connection-hiccup", NO_CAUSE]
    assert scored.to_json()["matrix_s"]["kv-preemption"] == {"kv-preemption": pytest.approx(0.6)}


def test_unknown_counts_as_wrong() -> None:
    down = stream(GAP, stream_id="a", where=Where.GATEWAY_DOWNSTREAM)
    up = stream(cadence(28, 30), stream_id="a", where=Where.GATEWAY_UPSTREAM)
    result = explain([down, up])  # a gap made inside the gateway: unknown
    scored = score(result, [lab("a", "kv-preemption")])  # type: ignore[list-item]
    assert scored.seconds == {("kv-preemption", "unknown"): pytest.approx(0.6)}
    assert scored.share_right == 0


def test_stalls_without_truth_are_counted_apart() -> None:
    result = explain([stream(GAP, stream_id="a")])
    scored = score(result, [lab("other", "kv-preemption")])  # type: ignore[list-item]
    assert scored.unmatched == 1
    assert scored.unmatched_s == pytest.approx(0.6)
    assert scored.share_right is None
    # a lab record without the cause annotation is no truth either
    plain = stream(cadence(20, 20), stream_id="a", where=Where.LAB)
    assert score(result, [plain]).unmatched == 1
