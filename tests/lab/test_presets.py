"""Each preset makes the pause it promises, labelled with the right cause (simulated time)."""

from __future__ import annotations

import pytest

from steadystream.lab import PRESETS, LabRequest
from tests.support.lab import MS, Arrival, arrivals, content_causes, gaps_ms, run_lab


@pytest.mark.asyncio
async def test_steady_is_a_clean_cadence_with_no_causes() -> None:
    run = await run_lab("steady", arrivals([0.0]))
    (truth,) = run.truths
    gaps = gaps_ms(truth)
    step = 25.0 + 0.02  # base + one sequence
    assert truth.finish_reason == "stop"
    assert gaps[1:] == pytest.approx([step] * (len(gaps) - 1))
    assert all(causes == () for causes in content_causes(truth))


@pytest.mark.asyncio
async def test_prefill_interference_stretches_steps_by_hundreds_of_ms() -> None:
    run = await run_lab("prefill-interference", arrivals([0.0, 200.0]))
    for truth in run.truths:
        gaps = gaps_ms(truth)
        causes = content_causes(truth)
        long = [i for i, gap in enumerate(gaps) if i and gap > 200]
        assert len(long) >= 3  # a 4,000-token prompt every 1.5 s over a 7 s answer
        for i in long:
            assert gaps[i] >= 400  # 4,000 prompt tokens at 0.1 ms each, beyond the step
            assert causes[i][0] == "prefill-interference"
        # prefill is the only cause here (short ones: the other client's prompt)
        assert {c for c in causes if c} == {("prefill-interference",)}


@pytest.mark.asyncio
async def test_kv_pressure_preempted_streams_pause_for_at_least_the_recompute() -> None:
    chosen = PRESETS["kv-pressure"]
    per_token_ms = chosen.scheduler.prefill_per_token_ms
    run = await run_lab(chosen, arrivals([300.0, 3000.0, 6000.0, 9000.0, 12000.0]))
    preempted = [t for t in run.truths if t.preempted_ns]
    assert preempted, "kv-pressure must preempt some client streams"
    for truth in preempted:
        content = [
            (planned, tokens)
            for planned, tokens, kind in zip(
                truth.planned_ns, truth.tokens, truth.kinds, strict=True
            )
            if kind == 1
        ]
        causes = content_causes(truth)
        for at in truth.preempted_ns:
            resumed = next(i for i, (planned, _) in enumerate(content) if planned > at)
            before = content[resumed - 1][0] if resumed else truth.arrival_ns
            done = sum(tokens for _, tokens in content[:resumed])
            recompute_ms = (truth.prompt_tokens + done) * per_token_ms
            assert (content[resumed][0] - before) / MS >= recompute_ms
            assert causes[resumed][0] == "kv-preemption"
    # the admission limit of the KV cache also makes some streams queue before their first token
    assert any(content_causes(t)[0][:1] == ("queueing",) for t in run.truths)


@pytest.mark.asyncio
async def test_spec_decode_rejections_grow_as_acceptance_drifts_down() -> None:
    run = await run_lab("spec-decode", arrivals([0.0], max_tokens=400, ignore_eos=True))
    (truth,) = run.truths
    causes = content_causes(truth)
    tokens = [n for n, kind in zip(truth.tokens, truth.kinds, strict=True) if kind == 1]
    positions = [sum(tokens[:i]) / 400 for i in range(len(tokens))]
    early = [c for c, p in zip(causes, positions, strict=True) if p < 0.35]
    late = [c for c, p in zip(causes, positions, strict=True) if p > 0.55]
    rate_early = sum("spec-decode-rejection" in c for c in early) / len(early)
    rate_late = sum("spec-decode-rejection" in c for c in late) / len(late)
    assert rate_late > 2 * rate_early
    # an event carries every token a step made (1..k+1), more of them while acceptance is high
    assert max(tokens) == 5
    early_tokens = [n for n, p in zip(tokens, positions, strict=True) if p < 0.35]
    late_tokens = [n for n, p in zip(tokens, positions, strict=True) if p > 0.55]
    assert sum(early_tokens) / len(early_tokens) > sum(late_tokens) / len(late_tokens) + 1
    gaps = gaps_ms(truth)
    for gap, cause in zip(gaps[1:], causes[1:], strict=True):
        if "spec-decode-rejection" in cause:
            assert gap >= 3 * 31.0  # the step, and two lost to the rejected draft


@pytest.mark.asyncio
async def test_single_token_chunks_are_many_tiny_events() -> None:
    run = await run_lab("single-token-chunks", arrivals([0.0]))
    (truth,) = run.truths
    gaps = gaps_ms(truth)
    assert set(truth.tokens[1:-1]) == {1}
    assert gaps[1:] == pytest.approx([8.02] * (len(gaps) - 1))
    assert all(c == () for c in content_causes(truth))


@pytest.mark.asyncio
async def test_head_burst_releases_the_head_at_once_then_a_slow_tail() -> None:
    run = await run_lab("head-burst", arrivals([0.0]))
    (truth,) = run.truths
    gaps = gaps_ms(truth)
    causes = content_causes(truth)
    assert gaps[0] >= 40 * 10.0  # the first token waits for the whole head
    assert causes[0] == ("head-burst",)
    assert gaps[1:40] == [0.0] * 39  # the head arrives in one burst
    assert gaps[41:] == pytest.approx([60.0] * len(gaps[41:]))
    assert all(c == ("head-burst",) for c in causes[41:])


@pytest.mark.asyncio
async def test_flaky_network_hiccups_and_buffering_are_labelled() -> None:
    run = await run_lab("flaky-network", arrivals([0.0, 100.0, 200.0]))
    hiccups = 0
    for truth in run.truths:
        for gap, causes in zip(gaps_ms(truth), content_causes(truth), strict=True):
            if gap >= 500:
                assert causes[0] == "connection-hiccup"
                hiccups += 1
            if causes[:1] == ("connection-hiccup",):
                assert gap >= 400
        assert any(c[:1] == ("network-buffering",) for c in content_causes(truth))
    assert hiccups >= 3


@pytest.mark.asyncio
async def test_mixed_blends_several_causes() -> None:
    plan = [Arrival(t, LabRequest(f"r{i}")) for i, t in enumerate(range(0, 8000, 500))]
    run = await run_lab("mixed", plan)
    seen = {cause for t in run.truths for causes in content_causes(t) for cause in causes}
    assert {"prefill-interference", "network-buffering"} <= seen
    assert all(t.finish_reason == "stop" for t in run.truths)
