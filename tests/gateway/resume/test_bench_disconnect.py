"""bench --disconnect through the gateway: readers drop, come back with Last-Event-ID, and the
run says what they felt and whether anything was lost or doubled (bench/disconnect.py)."""

from __future__ import annotations

import pytest

from steadystream import Outcome, Timeline
from steadystream.bench import RunOptions
from steadystream.bench.disconnect import DisconnectPolicy, reconnect_summary
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.bench import small_run
from tests.support.gateway import answer, finished_truth, gateway_config, upstream

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

MS = 1_000_000
BACK_MS = 300


@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_readers_who_drop_get_the_rest_of_the_answer_once(api: str) -> None:
    policy = DisconnectPolicy.parse(f"after=6tok,back={BACK_MS}ms")
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        result = await small_run(
            gw.url + "/v1",
            requests=3,
            max_tokens=30,
            api=api,
            options=RunOptions(max_requests=3, disconnect=policy),
        )
        truths = {t.stream_id: finished_truth(lab, t.stream_id) for t in result.timelines}
    assert len(result.timelines) == 3
    for timeline in result.timelines:
        assert timeline.outcome is Outcome.COMPLETE, timeline.error
        (back,) = timeline.meta["reconnects"]
        assert back["status"] == 200
        assert (back["lost"], back["doubled"]) == (0, 0)
        assert back["first_ms"] >= back["dropped_ms"] + BACK_MS
        # every piece the engine wrote, once, in order: the drop cost nothing but time
        pieces = int(timeline.text_mask.sum())
        assert pieces == len(answer(truths[timeline.stream_id]))
    summary = reconnect_summary(result.timelines)
    assert summary is not None
    assert (summary.reconnects, summary.lost, summary.doubled, summary.failed) == (3, 0, 0, 0)
    assert min(summary.felt_gap_ms) >= BACK_MS


async def test_a_server_that_keeps_no_streams_is_named_as_the_reason() -> None:
    policy = DisconnectPolicy.parse("after=3tok,back=10ms")
    with LabServer("steady") as lab:
        result = await small_run(
            lab.base_url,
            requests=1,
            max_tokens=20,
            options=RunOptions(max_requests=1, disconnect=policy),
        )
    (timeline,) = result.timelines
    assert timeline.outcome is Outcome.ERROR
    assert "x-steadystream-stream-id" in (timeline.error or "")
    assert "resume" in (timeline.error or "")


async def _one_dropped_stream(spec: str, max_tokens: int, **resume: object) -> Timeline:
    policy = DisconnectPolicy.parse(spec)
    sections = {"resume": resume} if resume else {}
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), **sections)) as gw,
    ):
        result = await small_run(
            gw.url + "/v1",
            requests=1,
            max_tokens=max_tokens,
            options=RunOptions(max_requests=1, disconnect=policy),
        )
    (timeline,) = result.timelines
    return timeline


async def test_a_return_the_gateway_refuses_is_recorded_as_not_resumed() -> None:
    # a stream past resume.max_stream_bytes is relayed but not kept: the return gets a 410
    timeline = await _one_dropped_stream("after=3tok,back=50ms", 40, max_stream_bytes="1KiB")
    assert timeline.outcome is Outcome.ERROR
    assert "not resumed" in (timeline.error or "")
    (back,) = timeline.meta["reconnects"]
    assert back["status"] == 410
    assert back["first_ms"] is None
    assert "410" in back["error"]
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert (summary.reconnects, summary.failed, summary.felt_gap_ms) == (1, 1, ())


async def test_a_stream_the_gateway_cut_while_the_reader_was_away_is_not_whole() -> None:
    # grace 0: the upstream is cancelled as the reader leaves; the return gets the events
    # kept and then the cancel in band, which is no clean reconnect
    timeline = await _one_dropped_stream("after=3tok,back=200ms", 40, grace="0s")
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert back["status"] == 200
    assert "cancelled" in back["error"]
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert summary.failed == 1


async def test_a_drop_point_the_answer_ends_at_is_no_failed_return() -> None:
    # the sixth chunk of six and [DONE] can come in one read: nothing is left to come back for
    timeline = await _one_dropped_stream("after=6tok,back=50ms", 6)
    assert timeline.outcome is Outcome.COMPLETE, timeline.error
    for back in timeline.meta.get("reconnects", []):
        assert back["status"] == 200, back
        assert "error" not in back, back
        assert back["first_ms"] is not None, back
