"""Where a stall is split, pinned at its bounds (docs/attribution.md#shares): both parts at
least 35 ms and 5 % of it; without engine metrics, a common part of half the stall or more is
a stretched step even when the stall is not shared."""

from __future__ import annotations

import pytest

from steadystream.attribution.evidence import EngineReading, Evidence
from steadystream.attribution.rules import decide
from steadystream.attribution.shares import Share, split
from steadystream.attribution.streams import StallSite, StreamView
from tests.support.attribution import MS, cadence, stream

# A prefill that stretched a step for everyone, and drafts of this stream's own: two causes.
PREFILL_AND_DRAFTS = EngineReading(
    preemptions=0.0,
    prompt_tokens=4000.0,
    drafts=8.0,
    draft_tokens=32.0,
    accepted=8.0,
    waiting_peak=None,
    kv_peak=None,
    lag_resets=None,
    lag_mean_s=None,
)


def shares(
    duration_ms: float,
    own_ms: float,
    *,
    engine: EngineReading | None = PREFILL_AND_DRAFTS,
    shared: float = 1.0,
) -> tuple[Share, ...]:
    """The shares of a mid-stream stall of ``duration_ms`` whose last ``own_ms`` were this
    stream's alone (2 counted tokens per chunk: drafts accepted)."""
    view = StreamView.of(0, stream(cadence(30, 10), tokens=[2] * 10))
    duration = round(duration_ms * MS)
    site = StallSite(view, 5, 0, duration)
    common = duration - round(own_ms * MS)
    ev = Evidence(site, 1, shared, 7, None, (), engine, 0.0, common)
    return split(ev, decide(ev))[0]


@pytest.mark.parametrize(
    ("duration_ms", "part_ms", "parts"),
    [
        (500, 34, 1),  # 5 % is 25 ms: 35 ms is the bound
        (500, 36, 2),
        (1000, 49, 1),  # 5 % is 50 ms: the bound
        (1000, 51, 2),
    ],
)
def test_a_part_below_35ms_or_5_percent_is_not_split_off(
    duration_ms: float, part_ms: float, parts: int
) -> None:
    own = shares(duration_ms, part_ms)
    assert len(own) == parts
    common = shares(duration_ms, duration_ms - part_ms)  # the other part short
    if parts == 2:
        assert {s.cause for s in own} == {s.cause for s in common}
        assert {s.cause for s in own} == {"prefill-interference", "spec-decode-rejection"}
        small = min(own, key=lambda s: s.fraction)
        assert small.fraction == pytest.approx(part_ms / duration_ms)
    else:
        # the own part too short: all of it the stretched step; the common part too short:
        # no stretched step to speak of, the rules' one cause
        assert [(s.cause, s.fraction) for s in own] == [("prefill-interference", 1.0)]
        assert len(common) == 1


def test_without_engine_metrics_a_common_half_is_a_stretched_step() -> None:
    # not shared by the rules' reading (the others did not resume within a step of it)
    half = shares(600, 300, engine=None, shared=0.2)
    assert {(s.cause, s.confidence) for s in half} == {
        ("prefill-interference", 0.6),
        ("spec-decode-rejection", 0.6),
    }
    under = shares(600, 301, engine=None, shared=0.2)
    assert [(s.cause, s.fraction) for s in under] == [("spec-decode-rejection", 1.0)]
