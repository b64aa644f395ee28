"""The scheduler's mechanisms in simulated time: determinism, queueing, cancellation, faults."""

from __future__ import annotations

import asyncio

import pytest

from steadystream import FakeClock, Outcome, Where
from steadystream.lab import FaultSpec, LabEngine, LabRequest, parse_fault_header
from tests.support.lab import (
    MS,
    Arrival,
    arrivals,
    content_causes,
    drain,
    gaps_ms,
    run_lab,
    scenario,
    schedule,
)


def _mixed_plan() -> list[Arrival]:
    times = [0.0, 130.0, 260.0, 900.0, 1400.0, 2500.0, 2600.0, 4000.0]
    return [
        Arrival(t, LabRequest(f"r{i}", prompt_tokens=40 + 300 * i)) for i, t in enumerate(times)
    ]


@pytest.mark.asyncio
async def test_same_seed_and_arrivals_give_the_same_schedule_of_causes() -> None:
    first = await run_lab("mixed", _mixed_plan(), seed=3)
    second = await run_lab("mixed", _mixed_plan(), seed=3)
    other = await run_lab("mixed", _mixed_plan(), seed=4)
    runs = [[schedule(run.by_id(f"r{i}")) for i in range(8)] for run in (first, second, other)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert any(causes for request in runs[0] for _, _, causes in request)
    texts = [[run.by_id(f"r{i}").texts for i in range(8)] for run in (first, second, other)]
    assert texts[0] == texts[1] != texts[2]


@pytest.mark.asyncio
async def test_admission_limit_makes_the_third_request_queue() -> None:
    chosen = scenario(scheduler={"max_running": 2})
    run = await run_lab(chosen, arrivals([0.0, 0.0, 0.0], max_tokens=20, ignore_eos=True))
    first, second, third = (run.by_id(f"r{i}") for i in range(3))
    assert content_causes(third)[0][0] == "queueing"
    assert third.admitted_ns[0] >= min(first.finished_ns or 0, second.finished_ns or 0)
    assert gaps_ms(third)[0] > 20 * 25.0  # it waited for a whole answer
    assert content_causes(first)[0] == content_causes(second)[0] == ()
    assert run.engine.scheduler.used_blocks == 0


@pytest.mark.asyncio
async def test_unchunked_long_prompt_stretches_one_step_for_everyone() -> None:
    chosen = scenario(scheduler={"chunked_prefill": False, "prefill_per_token_ms": 0.1})
    plan = [
        Arrival(0.0, LabRequest("short", max_tokens=40, ignore_eos=True)),
        Arrival(300.0, LabRequest("long", prompt_tokens=3000, max_tokens=5, ignore_eos=True)),
    ]
    run = await run_lab(chosen, plan)
    short = run.by_id("short")
    stretched = [
        (gap, causes)
        for gap, causes in zip(gaps_ms(short), content_causes(short), strict=True)
        if causes
    ]
    assert len(stretched) == 1
    gap, causes = stretched[0]
    assert gap == pytest.approx(25.0 + 0.04 + 300.0)
    assert causes == ("prefill-interference",)


@pytest.mark.asyncio
async def test_chunked_prefill_spreads_a_long_prompt_over_several_small_stretches() -> None:
    chosen = scenario(scheduler={"prefill_chunk_tokens": 500, "prefill_per_token_ms": 0.1})
    plan = [
        Arrival(0.0, LabRequest("short", max_tokens=40, ignore_eos=True)),
        Arrival(300.0, LabRequest("long", prompt_tokens=3000, max_tokens=5, ignore_eos=True)),
    ]
    run = await run_lab(chosen, plan)
    short = run.by_id("short")
    stretched = [gap for gap, c in zip(gaps_ms(short), content_causes(short), strict=True) if c]
    assert len(stretched) == 6  # 3,000 tokens in chunks of 500
    assert max(stretched) == pytest.approx(25.0 + 0.04 + 50.0)


@pytest.mark.asyncio
async def test_disconnect_frees_kv_within_one_step_of_the_notice() -> None:
    plan = [Arrival(0.0, LabRequest("r0", max_tokens=100, ignore_eos=True), cancel_at_ms=510.0)]
    run = await run_lab("steady", plan)
    truth = run.by_id("r0")
    assert truth.disconnect_noticed_ns is not None
    assert truth.kv_freed_step_ns is not None
    freed_after = truth.kv_freed_step_ns - truth.disconnect_noticed_ns
    assert 0 <= freed_after <= 25.02 * MS
    assert truth.kv_freed_ns == truth.kv_freed_step_ns  # simulated time: no lag
    assert truth.tokens_after_disconnect == 1  # the step in flight when the client left
    assert truth.tokens_generated == truth.tokens_written + 1
    assert truth.finish_reason == "cancelled"
    assert truth.to_timeline().outcome is Outcome.CANCELLED
    assert run.engine.scheduler.used_blocks == 0
    assert run.engine.num_running == 0


@pytest.mark.asyncio
async def test_stall_and_slow_first_token_faults_are_labelled() -> None:
    faults = parse_fault_header("stall-after=5:300ms, slow-first-token=1s")
    plan = [Arrival(0.0, LabRequest("r0", max_tokens=10, ignore_eos=True, faults=faults))]
    run = await run_lab("steady", plan)
    truth = run.by_id("r0")
    gaps = gaps_ms(truth)
    causes = content_causes(truth)
    assert gaps[0] >= 1000
    assert causes[0] == ("injected-fault",)
    assert gaps[5] >= 300
    assert causes[5] == ("injected-fault",)
    assert all(c == () for i, c in enumerate(causes) if i not in (0, 5))
    assert truth.fault == "stall-after=5:300ms,slow-first-token=1000ms"


@pytest.mark.asyncio
async def test_a_forever_stall_holds_until_the_client_leaves() -> None:
    faults = FaultSpec(stall_after=3)
    plan = [
        Arrival(0.0, LabRequest("r0", max_tokens=10, faults=faults), cancel_at_ms=2000.0),
    ]
    run = await run_lab("steady", plan)
    truth = run.by_id("r0")
    assert truth.tokens_written == 3
    assert truth.disconnect_noticed_ns == 2000 * MS
    # the engine was idle (only a parked sequence): it frees the KV at the notice itself
    assert truth.kv_freed_step_ns == truth.disconnect_noticed_ns
    assert run.engine.scheduler.used_blocks == 0


@pytest.mark.asyncio
async def test_error_and_reset_faults_end_the_stream_after_n_tokens() -> None:
    plan = [
        Arrival(0.0, LabRequest("err", faults=FaultSpec(error_after=4))),
        Arrival(0.0, LabRequest("rst", faults=FaultSpec(reset_after=6))),
        Arrival(0.0, LabRequest("short", max_tokens=3, faults=FaultSpec(error_after=4))),
    ]
    run = await run_lab("steady", plan)
    assert (run.by_id("err").tokens_written, run.by_id("err").finish_reason) == (4, "error")
    assert (run.by_id("rst").tokens_written, run.by_id("rst").finish_reason) == (6, "reset")
    # a fault after the answer's end never fires
    assert run.by_id("short").finish_reason == "length"


@pytest.mark.asyncio
async def test_scenario_faults_apply_to_their_share_of_requests() -> None:
    chosen = scenario(faults={"share": 0.5, "error_after": 2})
    run = await run_lab(chosen, arrivals([0.0] * 20, max_tokens=5))
    reasons = [t.finish_reason for t in run.truths]
    assert 3 <= reasons.count("error") <= 17
    assert reasons.count("error") + reasons.count("length") == 20


@pytest.mark.asyncio
async def test_ground_truth_timeline_has_lab_vantage_and_causes() -> None:
    run = await run_lab("head-burst", arrivals([0.0], max_tokens=60, ignore_eos=True))
    truth = run.by_id("r0")
    timeline = truth.to_timeline(keep_text=True)
    assert timeline.where is Where.LAB
    assert timeline.total_tokens == 60
    assert timeline.annotations["cause"][0] == "head-burst"
    assert timeline.text == "".join(truth.texts)
    assert timeline.meta["admitted_ns"] == [0]
    assert truth.to_json()["events"][0]["causes"] == ["head-burst"]


@pytest.mark.asyncio
async def test_background_requests_leave_no_ground_truth_and_free_their_kv() -> None:
    run = await run_lab("prefill-interference", arrivals([0.0], max_tokens=20), until_ms=5000)
    assert [t.request_id for t in run.engine.truths.records()] == ["r0"]
    assert run.engine.scheduler.used_blocks == 0  # stop() retired everything


@pytest.mark.asyncio
async def test_engine_refuses_requests_once_stopping() -> None:
    clock = FakeClock()
    engine = LabEngine(scenario(), clock=clock)
    await engine.start()
    handle = engine.submit(LabRequest("r0", max_tokens=3))
    writer = asyncio.ensure_future(drain(handle))
    await clock.run_until_idle()
    await writer
    await engine.stop()
    assert handle.truth.done
    with pytest.raises(RuntimeError):
        engine.submit(LabRequest("r1"))
