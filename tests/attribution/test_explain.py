"""The rules on hand-made timelines: each piece of evidence points where attribution.md says."""

from __future__ import annotations

import pytest

from steadystream import TokenSource, Where
from steadystream.attribution import UNKNOWN, EngineSamples, explain
from tests.support.attribution import MS, T0, cadence, stream

FREEZE = 600.0  # ms: over the 400 ms threshold


def test_no_stall_no_explanation() -> None:
    result = explain([stream(cadence(30, 40))])
    assert result.stalls == []
    assert result.by_cause == []
    assert result.dominant is None
    assert result.stall_time_s == 0


def test_a_stall_is_placed_by_event_index_and_offsets() -> None:
    times = [*cadence(30, 10), *cadence(30 + 9 * 25 + FREEZE, 10)]
    (stall,) = explain([stream(times)]).stalls
    assert stall.event_index == 11  # the role event comes first
    assert stall.text_index == 10
    assert stall.start_ns == round(times[9] * MS)
    assert stall.end_ns == round(times[10] * MS)
    assert stall.duration_s == pytest.approx(FREEZE / 1000)
    assert not stall.first_token
    assert stall.started_at == pytest.approx(T0 + times[9] / 1000)


def test_threshold_is_strict_and_must_be_positive() -> None:
    times = [30.0, 430.0, 455.0]  # exactly 400 ms
    assert explain([stream(times)]).stalls == []
    assert len(explain([stream(times)], stall_threshold_ns=399 * MS).stalls) == 1
    with pytest.raises(ValueError, match="stall_threshold_ns"):
        explain([stream(times)], stall_threshold_ns=0)


def test_a_gap_every_stream_in_flight_shares_is_prefill_interference() -> None:
    streams = []
    for i in range(4):
        times = [*cadence(30 + i, 10), *cadence(30 + i + 9 * 25 + 450, 10)]
        streams.append(stream(times, stream_id=f"s{i}"))
    result = explain(streams)
    assert len(result.stalls) == 4
    assert {s.cause for s in result.stalls} == {"prefill-interference"}
    assert "paused and resumed with it" in result.stalls[0].evidence
    assert result.by_cause[0].cause == "prefill-interference"
    assert "prefill chunks" in result.by_cause[0].mitigation


def test_a_lump_after_a_gap_in_a_smooth_stream_is_a_connection_hiccup() -> None:
    before = cadence(30, 10)
    lump_at = before[-1] + FREEZE
    after = [lump_at + 0.01 * i for i in range(20)] + cadence(lump_at + 25, 10)
    (stall,) = explain([stream([*before, *after])]).stalls
    assert stall.cause == "connection-hiccup"
    assert "20 text events arrived together" in stall.evidence


def test_a_stream_that_always_comes_in_lumps_is_buffered() -> None:
    times: list[float] = []
    at = 30.0
    for _ in range(6):
        times += [at + 0.01 * i for i in range(8)]
        at += FREEZE
    result = explain([stream(times)])
    assert result.stalls
    assert {s.cause for s in result.stalls} == {"network-buffering"}


def test_an_own_pause_at_the_usual_cadence_alone_reads_as_preemption() -> None:
    others = [stream(cadence(30, 60), stream_id=f"o{i}") for i in range(3)]
    times = [*cadence(30, 10), *cadence(30 + 9 * 25 + FREEZE, 20)]
    result = explain([stream(times), *others])
    (stall,) = result.stalls
    assert stall.cause == "kv-preemption"
    assert stall.confidence == pytest.approx(0.5)
    assert "did not pause with it" in stall.evidence


def test_several_tokens_per_chunk_point_to_speculative_decoding() -> None:
    times = [*cadence(30, 10), *cadence(30 + 9 * 25 + FREEZE, 10)]
    spec = stream(times, tokens=[3, 1, 2, 4, 1, 2, 3, 1, 2, 2] * 2)
    assert explain([spec]).stalls[0].cause == "spec-decode-rejection"
    # Estimated counts say nothing about drafts: a tokenizer-free estimate is often above 1.
    guessed = stream(times, tokens=[3, 1, 2, 4, 1, 2, 3, 1, 2, 2] * 2,
                     token_source=TokenSource.ESTIMATED)  # fmt: skip
    assert explain([guessed]).stalls[0].cause == "kv-preemption"


def test_before_the_first_token_queueing_or_a_held_head() -> None:
    queued = stream(cadence(900, 20))
    (stall,) = explain([queued]).stalls
    assert stall.first_token
    assert stall.cause == "queueing"
    assert stall.start_ns == 0
    assert stall.event_index == 1
    head = [900 + 0.01 * i for i in range(40)] + cadence(1000, 10, 60)
    held = [stream(head, stream_id=f"h{i}", start_ms=5.0 * i) for i in range(3)]
    stall = explain(held).stalls[0]
    assert (stall.cause, stall.confidence) == ("head-burst", 0.85)
    # one stream alone with its head in a lump: a connection that froze, no server policy
    assert explain(held[:1]).stalls[0].cause == "connection-hiccup"


def test_streams_pausing_each_for_itself_are_not_one_stretched_step() -> None:
    # Four streams silent at once, but each pausing and resuming at its own time (rejected
    # drafts, preemptions): not one step stretched for everyone.
    streams = []
    for i in range(4):
        times = [*cadence(30, 10 + i), *cadence(30 + (9 + i) * 25 + 450 + 40 * i, 10)]
        streams.append(stream(times, stream_id=f"s{i}"))
    result = explain(streams)
    assert "prefill-interference" not in {s.cause for s in result.stalls}


def test_a_lumped_first_token_in_one_stream_only_is_a_hiccup() -> None:
    lone = stream([900 + 0.01 * i for i in range(30)] + cadence(1000, 10), stream_id="lone")
    others = [stream(cadence(30, 60), stream_id=f"o{i}", start_ms=3000) for i in range(3)]
    stall = explain([lone, *others]).stalls[0]
    assert stall.cause == "connection-hiccup"
    assert "few other streams" in stall.evidence


def test_a_long_first_token_wait_shared_by_all_is_queueing_not_one_step() -> None:
    streams = [stream(cadence(30, 10), stream_id="busy")]
    streams[0] = stream([*cadence(30, 10), *cadence(30 + 9 * 25 + 2000, 10)], stream_id="busy")
    waiting = stream(cadence(30 + 9 * 25 + 2000, 10), stream_id="new", start_ms=100)
    by_id = {s.stream_id: s for s in explain([*streams, waiting]).stalls}
    assert by_id["new"].cause == "queueing"


def engine(rows: list[tuple[float, dict[str, float]]]) -> EngineSamples:
    return EngineSamples.from_scrapes([(T0 + t / 1000, values) for t, values in rows])


OWN_PAUSE = [*cadence(30, 10), *cadence(30 + 9 * 25 + FREEZE, 20)]  # gap 255..855 ms


def counters(at_ms: float, **after: float) -> EngineSamples:
    """Scrapes every 100 ms to 2 s; the named counters step up at ``at_ms``."""
    base = {"vllm:num_preemptions_total": 0.0, "vllm:spec_decode_num_drafts_total": 0.0,
            "vllm:prompt_tokens_total": 100.0, "vllm:num_requests_waiting": 0.0}  # fmt: skip
    rows = []
    for t in range(0, 2001, 100):
        values = dict(base)
        if t >= at_ms:
            values.update(after)
        rows.append((float(t), values))
    return engine(rows)


def test_engine_preemption_during_the_gap_is_kv_preemption() -> None:
    samples = counters(300, **{"vllm:num_preemptions_total": 1.0, "vllm:kv_cache_usage_perc": 0.99})
    (stall,) = explain([stream(OWN_PAUSE)], engine=samples).stalls
    assert stall.cause == "kv-preemption"
    assert stall.confidence == pytest.approx(0.9)
    assert "preempted 1" in stall.evidence


def test_a_preemption_long_after_the_gap_does_not_count() -> None:
    samples = counters(1500, **{"vllm:num_preemptions_total": 1.0})
    (stall,) = explain([stream(OWN_PAUSE)], engine=samples).stalls
    # the engine saw nothing: the pause was most likely on the way
    assert stall.cause == "connection-hiccup"
    assert stall.confidence == pytest.approx(0.4)
    assert "no preemption" in stall.evidence


def test_engine_drafts_during_the_gap_are_spec_decode() -> None:
    samples = counters(
        300,
        **{
            "vllm:spec_decode_num_drafts_total": 40.0,
            "vllm:spec_decode_num_draft_tokens_total": 160.0,
            "vllm:spec_decode_num_accepted_tokens_total": 30.0,
        },
    )
    (stall,) = explain([stream(OWN_PAUSE)], engine=samples).stalls
    assert stall.cause == "spec-decode-rejection"
    assert "19% of 160 draft tokens accepted" in stall.evidence


def test_engine_waiting_requests_make_a_first_token_wait_queueing() -> None:
    samples = counters(100, **{"vllm:num_requests_waiting": 3.0})
    (stall,) = explain([stream(cadence(900, 20))], engine=samples).stalls
    assert stall.cause == "queueing"
    assert stall.confidence == pytest.approx(0.9)


def test_scrapes_that_do_not_cover_the_gap_fall_back_to_the_stream() -> None:
    samples = engine([(5000.0, {"vllm:num_preemptions_total": 0.0}), (5100.0, {})])
    (stall,) = explain([stream(OWN_PAUSE)], engine=samples).stalls
    assert stall.cause == "kv-preemption"
    assert stall.confidence == pytest.approx(0.5)


def test_a_gap_the_gateway_did_not_see_is_on_the_network_after_it() -> None:
    client = stream(OWN_PAUSE, stream_id="r1")
    smooth = stream(cadence(28, 30), stream_id="r1", where=Where.GATEWAY_DOWNSTREAM)
    result = explain([client, smooth])
    assert result.streams == 1  # the gateway's record is evidence, not a second stream
    (stall,) = result.stalls
    assert stall.where is Where.CLIENT
    assert stall.cause == "connection-hiccup"
    assert stall.confidence == pytest.approx(0.95)
    assert "absent at gateway-downstream, present at client" in stall.evidence
    assert any("gateway-downstream" in s for s in result.sources)


def test_a_gap_seen_at_every_edge_is_not_placed_on_the_path() -> None:
    client = stream(OWN_PAUSE, stream_id="r1")
    gateway = stream([t - 2 for t in OWN_PAUSE], stream_id="r1", where=Where.GATEWAY_UPSTREAM)
    (stall,) = explain([client, gateway]).stalls
    assert stall.cause == "kv-preemption"
    assert "also seen at gateway-upstream" in stall.evidence


def test_a_gap_made_inside_the_gateway_is_unknown() -> None:
    down = stream(OWN_PAUSE, stream_id="r1", where=Where.GATEWAY_DOWNSTREAM)
    up = stream(cadence(28, 30), stream_id="r1", where=Where.GATEWAY_UPSTREAM)
    (stall,) = explain([down, up]).stalls
    assert stall.cause == UNKNOWN
    assert "inside the gateway" in stall.evidence


def test_streams_without_a_wall_clock_are_explained_alone() -> None:
    times = [*cadence(30, 10), *cadence(30 + 9 * 25 + 450, 10)]
    streams = [stream(times, stream_id=f"s{i}").replace(started_at=None) for i in range(3)]
    result = explain(streams)
    assert {s.cause for s in result.stalls} == {"kv-preemption"}  # nothing says it was shared
    assert all(s.started_at is None for s in result.stalls)


def test_totals_and_most_hurt_streams() -> None:
    long = stream([*cadence(30, 5), *cadence(30 + 4 * 25 + 1500, 5)], stream_id="long")
    short = stream([*cadence(30, 5), *cadence(30 + 4 * 25 + 500, 5)], stream_id="short")
    fine = stream(cadence(30, 20), stream_id="fine")
    result = explain([short, fine, long], worst=1)
    assert [h.stream_id for h in result.hurt] == ["long"]
    assert result.stall_time_s == pytest.approx(2.0)
    payload = result.to_json()
    assert set(payload["stalls"][0]) >= {
        "stream_id", "event_index", "start_ns", "end_ns", "duration_s", "cause",
        "confidence", "evidence",
    }  # fmt: skip
    share = payload["by_cause"]["kv-preemption"]
    assert share["stalls"] == 2
    assert share["share"] == pytest.approx(1.0)


def test_an_edge_that_finished_during_the_clients_freeze_places_it() -> None:
    # The gateway wrote the whole answer while the client's connection was frozen: it ended
    # inside the gap, and its events during the gap place the freeze after it.
    client = stream([*cadence(30, 10), *[255 + 600 + 0.01 * i for i in range(20)]], stream_id="r")
    short = stream(cadence(28, 30), stream_id="r", where=Where.GATEWAY_DOWNSTREAM)  # ends at 753
    (stall,) = explain([client, short]).stalls
    assert "absent at gateway-downstream, present at client" in stall.evidence
    assert stall.confidence == pytest.approx(0.95)
