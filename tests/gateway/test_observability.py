"""/metrics agrees with the recordings; the openai SDK works through the gateway unchanged."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from steadystream import Outcome, Where
from steadystream.files import read_timelines
from steadystream.gateway import GatewayServer, TimelineRecorder
from steadystream.lab import LabServer
from steadystream.metrics import stream_metrics, stream_table
from tests.support.gateway import (
    MESSAGES,
    MemorySink,
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    get,
    post,
    upstream,
    wait_for,
)
from tests.support.scripted import ScriptedServer

pytestmark = pytest.mark.integration


def scrape(url: str) -> dict[str, float]:
    """Series summed over every label but ``edge`` and ``outcome`` (kept in the name)."""
    status, body = get(url, "/metrics")
    assert status == 200
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if "le" in sample.labels:
                continue
            keep = [sample.labels[k] for k in ("edge", "outcome", "kind") if k in sample.labels]
            name = ":".join([sample.name, *keep])
            totals[name] = totals.get(name, 0.0) + sample.value
    return totals


def _with_streams(metrics: dict[str, float], count: int) -> dict[str, float] | None:
    done = sum(v for k, v in metrics.items() if k.startswith("steadystream_streams_total"))
    return metrics if done == count else None


def test_metrics_are_consistent_with_the_recordings(tmp_path: Path) -> None:
    recorder = TimelineRecorder(tmp_path)
    with LabServer("steady", seed=2) as lab:
        config = gateway_config(
            # Only its fault may fail the lab: a busy machine's pause of a second is no stall.
            upstream(
                lab,
                "lab",
                forward_headers=["X-Lab-Fault"],
                timeouts={"first_token": "60s", "stall": "60s"},
            ),
            # The same lab again as the fallback, stalling after two tokens: a failover
            # that fails, so every kind of ending shows up once.
            upstream(lab, "again", fault="stall-after=2:forever", priority=1),
            failover={"policy": "continue"},
            # The stalled fallback has nowhere to go: it is waited out this long, then cut.
            watchdog={"give_up_timeout": "500ms"},
        )
        with (
            GatewayServer(config, recorder=recorder) as gateway,
            openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client,
        ):
            for max_tokens in (5, 9, 14):
                stream = client.chat.completions.create(
                    model="lab", messages=MESSAGES, max_tokens=max_tokens, stream=True
                )
                assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            faulty = client.with_options(default_headers={"X-Lab-Fault": "error-after=3"})
            with pytest.raises(openai.APIError, match="stall"):
                list(
                    faulty.chat.completions.create(
                        model="lab", messages=MESSAGES, max_tokens=9, stream=True
                    )
                )
            # A stream is observed once its last byte went out: wait for the fourth.
            metrics = wait_for(lambda: _with_streams(scrape(gateway.url), 4), what="4 streams")
    recorder.close()
    timelines = [t for f in sorted(tmp_path.iterdir()) for t in read_timelines(f).timelines]
    assert len(timelines) == 2 * 4
    edges = (("upstream", Where.GATEWAY_UPSTREAM), ("downstream", Where.GATEWAY_DOWNSTREAM))
    for edge, where in edges:
        table = stream_table([t for t in timelines if t.where is where])
        assert metrics[f"steadystream_gap_seconds_count:{edge}"] == len(table.gap_values_s)
        assert metrics[f"steadystream_gap_seconds_sum:{edge}"] == pytest.approx(
            float(table.gap_values_s.sum()), rel=1e-9
        )
        p99 = table.column("gap_p99_s")
        assert metrics[f"steadystream_stream_p99_gap_seconds_count:{edge}"] == np.count_nonzero(
            ~np.isnan(p99)
        )
        assert metrics[f"steadystream_stream_max_gap_seconds_sum:{edge}"] == pytest.approx(
            float(np.nansum(table.column("max_gap_s")))
        )
        assert metrics[f"steadystream_ttft_seconds_sum:{edge}"] == pytest.approx(
            float(np.nansum(table.column("ttft_s")))
        )
    downstream = [t for t in timelines if t.where is Where.GATEWAY_DOWNSTREAM]
    outcomes = [t.outcome for t in downstream]
    assert outcomes.count(Outcome.COMPLETE) == metrics["steadystream_streams_total:complete"] == 3
    assert outcomes.count(Outcome.ERROR) == metrics["steadystream_streams_total:error"] == 1
    (failed,) = [t for t in downstream if t.outcome is Outcome.ERROR]
    kinds = [(e["kind"], e["result"]) for e in failed.meta["failovers"]]
    assert kinds == [("continue", "failed"), ("continue", "error")]
    assert metrics["steadystream_failovers_total:continue"] == 2
    assert metrics["steadystream_stalls_total:inter-token"] == 1
    assert metrics["steadystream_errors_total:in_band"] == 1


def _chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "lab"}
    return b"data: " + orjson.dumps({**chunk, "choices": [choice]}) + b"\n\n"


def _reasons_then_answers(peer: socket.socket) -> None:
    peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    peer.sendall(_chunk({"role": "assistant"}))
    for word in ("let ", "me ", "think "):
        time.sleep(0.02)
        peer.sendall(_chunk({"reasoning_content": word}))
    time.sleep(0.15)  # the answer comes well after the reasoning began
    for word in ("a ", "b "):
        peer.sendall(_chunk({"content": word}))
    peer.sendall(_chunk({}, "stop") + b"data: [DONE]\n\n")


def test_ttfr_is_observed_apart_from_ttft_for_a_reasoning_stream(sink: MemorySink) -> None:
    scripted = ScriptedServer(_reasons_then_answers)
    thinker = {"name": "thinker", "base_url": f"http://127.0.0.1:{scripted.port}/v1"}
    config = gateway_config(thinker)
    try:
        with GatewayServer(config, recorder=sink) as gateway:
            streamed = post(gateway.base_url, "/chat/completions", chat_body(), timeout=10)
            metrics = wait_for(
                lambda: _with_streams(scrape(gateway.url), 1), what="the stream observed"
            )
    finally:
        scripted.close()
    assert streamed.status == 200
    assert streamed.text == "let me think a b "
    edges = sink.edges(streamed.headers["x-request-id"])
    for edge, timeline in zip(("upstream", "downstream"), edges, strict=True):
        recorded = stream_metrics(timeline)
        assert recorded.ttfr_s is not None
        assert recorded.ttft_s is not None
        assert recorded.ttft_s - recorded.ttfr_s > 0.15
        assert metrics[f"steadystream_ttfr_seconds_count:{edge}"] == 1
        assert metrics[f"steadystream_ttfr_seconds_sum:{edge}"] == pytest.approx(recorded.ttfr_s)
        assert metrics[f"steadystream_ttft_seconds_sum:{edge}"] == pytest.approx(recorded.ttft_s)


def test_the_openai_sdk_works_unchanged() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab", forward_headers=["X-Lab-Fault"]))
        with (
            GatewayServer(config) as gateway,
            openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client,
        ):
            stream = client.chat.completions.create(
                model="lab",
                messages=MESSAGES,
                max_tokens=12,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"X-Request-Id": "sdk-1"},
            )
            chunks = list(stream)
            completion = client.completions.create(model="lab", prompt="Hi", max_tokens=4)
            models = [m.id for m in client.models.list()]
            broken = client.with_options(default_headers={"X-Lab-Fault": "reset-after=4"})
            with pytest.raises(openai.APIError, match="reset"):
                list(
                    broken.chat.completions.create(
                        model="lab", messages=MESSAGES, max_tokens=12, stream=True
                    )
                )
            truth = finished_truth(lab, "sdk-1")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(answer(truth))
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == 12
    assert completion.choices[0].text
    assert models == ["lab"]
