"""Metrics on hand-built streams, with values worked out by hand (docs/metrics.md)."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream import EventKind, Outcome, Timeline
from steadystream.metrics import MetricConfig, fleet_metrics, stream_metrics, stream_table
from tests.metrics_reference import reference
from tests.support.timelines import (
    MS,
    make_timeline,
    paused_stream,
    reasoning_timeline,
    steady_stream,
)

# A reader who keeps up with this stream: expects the first token when it comes and reads
# 50 tokens/s; deadlines at the same cadence.
KEEPING_UP = MetricConfig(
    qoe_expected_ttft_ns=200 * MS,
    qoe_pace_ns_per_token=20 * MS,
    fluidity_prompt_deadline_ns=200 * MS,
    fluidity_decode_deadline_ns=20 * MS,
)


class TestTheMotivatingCase:
    def test_tpot_is_equal_and_blind(self) -> None:
        steady, paused = stream_metrics(steady_stream()), stream_metrics(paused_stream())
        assert steady.tpot_s == pytest.approx(0.020)
        assert paused.tpot_s == pytest.approx(0.020)
        assert steady.e2el_s == paused.e2el_s == pytest.approx(0.2 + 199 * 0.020)

    def test_worst_gap_and_stalls_tell_them_apart(self) -> None:
        steady, paused = stream_metrics(steady_stream()), stream_metrics(paused_stream())
        assert steady.max_gap_s == pytest.approx(0.020)
        assert paused.max_gap_s == pytest.approx(2.0)
        assert (steady.stall_count, paused.stall_count) == (0, 1)
        assert paused.stall_time_s == pytest.approx(2.0)
        assert paused.longest_stall_token == 100
        assert paused.longest_stall_fraction == pytest.approx(0.5)
        assert steady.longest_stall_token is None

    def test_per_stream_p99_hides_the_freeze(self) -> None:
        # One gap in 199 sits above the 99th percentile: rank 0.99 * 198 = 196.02 falls
        # between two 10 ms gaps, so p99 is 10 ms while the stream froze for 2 s.
        paused = stream_metrics(paused_stream())
        assert paused.gap_p99_s == pytest.approx(0.010)
        assert paused.gap_p50_s == pytest.approx(0.010)
        assert paused.jitter_ratio == pytest.approx(1.0)
        assert paused.unstable is False

    def test_goodput(self) -> None:
        fleet = fleet_metrics([steady_stream(), paused_stream()])
        assert fleet.goodput == 0.5
        assert fleet.p99_of_worst_gap_s == pytest.approx(0.020 + 0.99 * (2.0 - 0.020))
        assert fleet.stall_count == 1
        assert fleet.stalls_per_1k_tokens == pytest.approx(2.5)

    def test_qoe_and_fluidity_for_a_reader_who_keeps_up(self) -> None:
        steady = stream_metrics(steady_stream(), KEEPING_UP)
        paused = stream_metrics(paused_stream(), KEEPING_UP)
        assert steady.qoe == 1.0
        # Lag of 0.99 s from token 101 on: QoE = 1 - 100 * 0.99 / (200^2 * 0.02 / 2 + 200 * 0.99)
        assert paused.qoe == pytest.approx(1 - 99 / 598)
        assert steady.fluidity == 1.0
        assert paused.fluidity == pytest.approx(199 / 200)  # one missed deadline
        code_form = MetricConfig(**{**_fields(KEEPING_UP), "fluidity_form": "code"})
        # 99 tokens 10 ms early carry 0.99 s of slack; the 2 s gap misses by
        # floor((2 - 0.99) / 0.02) = 50 deadlines: 199 met / (199 + 50).
        assert stream_metrics(paused_stream(), code_form).fluidity == pytest.approx(199 / 249)
        assert stream_metrics(steady_stream(), code_form).fluidity == 1.0

    def test_a_late_first_token_misses_as_many_deadlines_as_in_etalons_code(self) -> None:
        # First token at 3 s, then 59 tokens 10 ms apart (each within D_d = 50 ms). Etalon's
        # code counts the first token's miss as 1 + floor((3 s - D_p) / D_d) = 1 + 58 = 59
        # deadlines (not floor(3 s / D_p) = 30): fluidity 59 / (59 + 59).
        late = make_timeline([3000 + 10 * i for i in range(60)], stream_id="late")
        code_form = MetricConfig(fluidity_form="code")
        assert stream_metrics(late, code_form).fluidity == pytest.approx(0.5)
        assert reference(late, code_form)["fluidity"] == pytest.approx(0.5)
        assert stream_metrics(late).fluidity == pytest.approx(59 / 60)  # documented: one miss
        # A first token just past D_p misses one deadline, as in the documented form.
        barely = make_timeline([101 + 10 * i for i in range(60)], stream_id="barely")
        assert stream_metrics(barely, code_form).fluidity == pytest.approx(59 / 60)

    def test_qoe_and_fluidity_for_a_slower_reader_absorb_the_freeze(self) -> None:
        # At the default 10 tokens/s the reader is far behind the 50 tokens/s stream when the
        # pause comes: a buffered reader never sees it. QoE = 1 for both; each misses only
        # the 100 ms first-token deadline (TTFT is 200 ms).
        for tl in (steady_stream(), paused_stream()):
            m = stream_metrics(tl)
            assert m.qoe == 1.0
            assert m.fluidity == pytest.approx(199 / 200)

    def test_the_discrete_qoe_form_misses_the_freeze(self) -> None:
        discrete = MetricConfig(**{**_fields(KEEPING_UP), "qoe_form": "discrete"})
        steady = stream_metrics(steady_stream(), discrete)
        paused = stream_metrics(paused_stream(), discrete)
        assert steady.qoe == pytest.approx((200**2 - 1) / 200**2)
        assert paused.qoe == 1.0  # why the exact reader model is the default


def _fields(cfg: MetricConfig) -> dict[str, object]:
    return {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}


class TestShapes:
    def test_role_only_first_chunk_is_not_the_first_token(self) -> None:
        m = stream_metrics(make_timeline([150, 170], role_ms=40))
        assert m.ttft_s == pytest.approx(0.150)
        assert m.ttfb_s == pytest.approx(0.040)
        assert m.chunks == 2

    def test_multi_token_chunks(self) -> None:
        m = stream_metrics(make_timeline([100, 160, 220], tokens=[4, 4, 2]))
        assert m.output_tokens == 10
        assert m.chunks == 3
        assert m.tokens_per_chunk == pytest.approx(10 / 3)
        assert m.gaps == 2
        assert m.max_gap_s == pytest.approx(0.060)
        assert m.tpot_s == pytest.approx(0.120 / 9)

    def test_one_token_stream_has_no_gap_metrics(self) -> None:
        m = stream_metrics(make_timeline([120]))
        assert m.ttft_s == pytest.approx(0.120)
        assert m.output_tokens == 1
        for name in (
            "tpot_s",
            "gap_p50_s",
            "gap_p99_s",
            "max_gap_s",
            "gap_mean_s",
            "gap_cv",
            "jitter_ratio",
            "unstable",
            "stall_count",
            "stall_time_s",
            "qoe",
        ):
            assert getattr(m, name) is None, name
        assert m.fluidity == 0.0  # the only token missed its 100 ms deadline

    def test_empty_stream(self) -> None:
        tl = make_timeline([], role_ms=None)
        m = stream_metrics(tl)
        assert (m.output_tokens, m.chunks, m.gaps) == (0, 0, 0)
        for name in ("ttft_s", "ttfb_s", "e2el_s", "fluidity", "qoe"):
            assert getattr(m, name) is None, name
        fleet = fleet_metrics([tl])
        assert fleet.goodput == 0.0  # no first token: not a good stream
        assert fleet.p99_of_p99_s is None

    def test_error_outcome_counts_against_goodput(self) -> None:
        ok = make_timeline([100, 120, 140], stream_id="ok")
        broken = make_timeline([100, 120], stream_id="broken", outcome=Outcome.ERROR)
        fleet = fleet_metrics([ok, broken])
        assert fleet.goodput == 0.5
        assert fleet.outcomes == {"complete": 1, "error": 1}

    def test_usage_only_final_chunk_is_not_a_token(self) -> None:
        m = stream_metrics(make_timeline([100, 120], usage_ms=900))
        assert m.e2el_s == pytest.approx(0.120)
        assert m.max_gap_s == pytest.approx(0.020)

    def test_envelope_overhead(self) -> None:
        m = stream_metrics(make_timeline([100, 120], wire_bytes=100, text="abcd"))
        # three events (role + 2 content) of 100 wire bytes for 8 content bytes
        assert m.envelope_overhead == pytest.approx(300 / 8)

    def test_head_burst(self) -> None:
        burst = [100.0] * 30 + [100 + 40 * i for i in range(1, 60)]
        m = stream_metrics(make_timeline(burst))
        # 30 tokens at TTFT plus 4 in the rest of the 200 ms window, against 200/40 = 5.
        assert m.head_burst == pytest.approx(34 / 5)
        steady = stream_metrics(steady_stream())
        assert steady.head_burst == pytest.approx(1.0)

    def test_keepalive_and_error_events_are_not_tokens(self) -> None:
        tl = make_timeline([100, 200])
        events = [*tl.events(), tl.events()[0]._replace(time_ns=150 * MS, kind=EventKind.KEEPALIVE)]
        events.sort(key=lambda e: e.time_ns)
        m = stream_metrics(Timeline.from_events(events, stream_id="k"))
        assert m.gaps == 1
        assert m.max_gap_s == pytest.approx(0.100)


class TestReasoning:
    """TTFT is the answer's first token; the reasoning before it has its own, TTFR."""

    def test_reasoning_then_content(self) -> None:
        tl = reasoning_timeline([300, 320, 340], [2000, 2020, 2040])
        m = stream_metrics(tl)
        assert m.ttfr_s == pytest.approx(0.300)
        assert m.ttft_s == pytest.approx(2.000)
        # Gaps run over both, as a reader who is shown the reasoning sees them.
        assert m.gaps == 5
        assert m.max_gap_s == pytest.approx(1.660)
        assert m.stall_count == 1
        assert m.e2el_s == pytest.approx(2.040)
        assert m.tpot_s == pytest.approx((2.040 - 0.300) / 5)  # decode pace from the first

    def test_a_stream_without_reasoning_has_no_ttfr(self) -> None:
        m = stream_metrics(make_timeline([150, 170]))
        assert m.ttft_s == pytest.approx(0.150)
        assert m.ttfr_s is None

    def test_a_stream_that_only_reasons_then_errors_has_no_ttft(self) -> None:
        tl = reasoning_timeline([250, 270, 290], outcome=Outcome.ERROR)
        m = stream_metrics(tl)
        assert m.ttfr_s == pytest.approx(0.250)
        for name in ("ttft_s", "qoe", "fluidity", "head_burst"):
            assert getattr(m, name) is None, name
        assert m.output_tokens == 3
        assert m.max_gap_s == pytest.approx(0.020)
        assert fleet_metrics([tl]).goodput == 0.0

    def test_goodput_and_experience_models_wait_for_the_answer(self) -> None:
        cfg = MetricConfig(ttft_target_ns=800 * MS)
        quick = reasoning_timeline([100], [120, 140, 160], stream_id="quick")
        slow = reasoning_timeline([100 + 20 * i for i in range(60)], [1300, 1320], stream_id="slow")
        assert fleet_metrics([quick, slow], cfg).goodput == 0.5  # slow: TTFT 1.3 s
        answer_only = make_timeline([1300, 1320], role_ms=0)
        for name in ("qoe", "fluidity"):
            assert getattr(stream_metrics(slow), name) == pytest.approx(
                getattr(stream_metrics(answer_only), name)
            ), name

    def test_head_burst_opens_at_the_answer(self) -> None:
        thinking = [20.0 * i for i in range(1, 50)]  # a steady 20 ms, up to 980 ms
        answer = [1000.0] * 30 + [1000 + 40 * i for i in range(1, 60)]
        m = stream_metrics(reasoning_timeline(thinking, answer))
        assert m.ttft_s == pytest.approx(1.0)
        assert m.head_burst == pytest.approx(34 / 5)  # as for the same answer alone

    def test_fleet_ttfr_over_the_streams_that_reasoned(self) -> None:
        runs = [
            reasoning_timeline([100 * (i + 1)], [1000 + 100 * i], stream_id=f"r{i}")
            for i in range(5)
        ] + [make_timeline([50 + i], stream_id=f"c{i}") for i in range(5)]
        fleet = fleet_metrics(runs)
        assert fleet.reasoning_streams == 5
        assert fleet.ttfr_p50_s == pytest.approx(0.300)
        assert fleet.ttfr_p99_s == pytest.approx(
            float(np.percentile([0.1, 0.2, 0.3, 0.4, 0.5], 99))
        )
        assert fleet.ttft_p50_s == pytest.approx(
            float(np.median([*range(50, 55), *range(1000, 1500, 100)])) / 1e3
        )
        plain = fleet_metrics(runs[5:])
        assert plain.reasoning_streams == 0
        assert plain.ttfr_p50_s is None
        assert plain.ttfr_p99_s is None


class TestFleet:
    def test_ttft_by_label(self) -> None:
        runs = [
            make_timeline([100 + i], stream_id=f"a{i}", labels={"tenant": "a"}) for i in range(3)
        ] + [make_timeline([500], stream_id="b", labels={"tenant": "b", "model": "m"})]
        fleet = fleet_metrics(runs)
        assert fleet.ttft_by["tenant"]["a"].streams == 3
        assert fleet.ttft_by["tenant"]["a"].p50_s == pytest.approx(0.101)
        assert fleet.ttft_by["tenant"]["b"].p99_s == pytest.approx(0.5)
        assert set(fleet.ttft_by["model"]) == {"m"}

    def test_pooled_gaps_follow_vllm_convention(self) -> None:
        runs = [steady_stream(), paused_stream()]
        fleet = fleet_metrics(runs)
        pooled = np.concatenate([np.diff(t.times[t.text_mask]) for t in runs]) / 1e9
        assert fleet.pooled_gap_p99_s == pytest.approx(float(np.percentile(pooled, 99)))
        assert fleet.pooled_gap_max_s == pytest.approx(2.0)

    def test_unstable_share(self) -> None:
        jumpy = make_timeline([0, 10, 20, 30, 40, 2000], stream_id="jumpy", role_ms=None)
        fleet = fleet_metrics([jumpy, steady_stream()])
        assert stream_metrics(jumpy).unstable is True
        assert fleet.unstable_share == 0.5

    def test_table_rows_match_single_stream_metrics(self) -> None:
        runs = [steady_stream(), paused_stream(), make_timeline([5])]
        table = stream_table(runs)
        assert [table.row(i) for i in range(3)] == [stream_metrics(t) for t in runs]
        assert np.allclose(table.gaps_of(1), np.diff(runs[1].times[1:]) / 1e9)

    def test_scalars_are_gateable(self) -> None:
        scalars = fleet_metrics([steady_stream()]).scalars()
        assert {"p99_of_p99_s", "p99_of_worst_gap_s", "goodput"} <= set(scalars)
        assert "outcomes" not in scalars

    def test_bad_config_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="stall_threshold_ns"):
            MetricConfig(stall_threshold_ns=0)
        with pytest.raises(ValueError, match="fluidity_form"):
            MetricConfig(fluidity_form="x")
