"""Streams through the gateway against the lab: bytes, headers, both-edge timelines vs truth."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream import EventKind, Outcome
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from steadystream.protocol import SseComment, SseEvent
from tests.support.gateway import (
    MS,
    MemorySink,
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    get,
    post,
    upstream,
)

pytestmark = pytest.mark.integration


def test_both_edge_timelines_match_the_lab_ground_truth(sink: MemorySink) -> None:
    # A 1 s pause after token 6 is the landmark both edges must show where the lab made it
    # (longer than a busy machine's pause, which would otherwise be the longest gap).
    with (
        LabServer("steady", seed=3) as lab,
        GatewayServer(
            gateway_config(
                upstream(lab, "lab", fault="stall-after=6:1s"), watchdog={"stall_timeout": "3s"}
            ),
            recorder=sink,
        ) as gateway,
    ):
        streamed = post(
            gateway.base_url, "/chat/completions", chat_body(16), {"X-Request-Id": "join-1"}
        )
        truth = finished_truth(lab, "join-1")  # the id the client chose reached the lab
        up, down = sink.edges("join-1")
    assert streamed.status == 200
    assert streamed.headers["x-request-id"] == "join-1"
    assert streamed.done
    assert streamed.error is None
    lab_events = [
        (t, text)
        for kind, t, text in zip(truth.kinds, truth.written_ns, truth.texts, strict=True)
        if kind == EventKind.CONTENT
    ]
    assert streamed.text == "".join(text for _, text in lab_events)
    for edge in (up, down):
        assert edge.outcome is Outcome.COMPLETE
        text_times = edge.times[edge.text_mask]
        assert len(text_times) == len(lab_events) == 16
        gaps = np.diff(text_times)
        lab_gaps = np.diff([t for t, _ in lab_events])
        # The pause is where the lab put it, as long as the lab made it (to within 50 ms).
        assert int(np.argmax(gaps)) == int(np.argmax(lab_gaps)) == 5
        assert abs(int(gaps.max()) - int(lab_gaps.max())) < 50 * MS
    # Same origin at both edges: the difference per event is what the gateway added.
    added = down.times - up.times
    assert (added >= 0).all()
    assert up.header_ns is not None
    assert up.first_byte_ns is not None
    assert down.first_byte_ns is not None
    assert down.first_byte_ns >= up.first_byte_ns
    assert up.meta["attempts"][0]["request_id"] == "join-1"


def test_sse_headers_keepalives_and_no_compression() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab", fault="slow-first-token=1300ms"),
            limits={"keepalive_interval": "100ms"},
        )
        with GatewayServer(config) as gateway:
            streamed = post(
                gateway.base_url, "/chat/completions", chat_body(3), {"Accept-Encoding": "gzip"}
            )
    assert streamed.status == 200
    headers = streamed.headers
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    assert headers["x-accel-buffering"] == "no"
    assert "content-encoding" not in headers
    assert headers["x-request-id"].startswith("gw-")  # made by the gateway when not given
    first_event = next(
        i for i, (_, item) in enumerate(streamed.items) if isinstance(item, SseEvent)
    )
    before = [item for _, item in streamed.items[:first_event]]
    # Every 100 ms while the lab held the first token for 1.3 s: at least 3 of the 12 or so,
    # however long a busy machine paused the gateway's timer (a second at most).
    assert len(before) >= 3
    assert all(isinstance(item, SseComment) and item.text == "keepalive" for item in before)
    assert streamed.done
    assert streamed.error is None
    assert streamed.text


def test_completions_and_non_streaming_requests(sink: MemorySink) -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab")), recorder=sink) as gateway,
    ):
        streamed = post(
            gateway.base_url,
            "/completions",
            {"model": "lab", "prompt": "Once", "stream": True, "max_tokens": 5},
            {"X-Request-Id": "cmpl-1"},
        )
        whole = post(
            gateway.base_url,
            "/chat/completions",
            {"model": "lab", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            {"X-Request-Id": "whole-1"},
        )
        status, models = get(gateway.url, "/v1/models")
        health_status, _ = get(gateway.url, "/healthz")
        streamed_truth = finished_truth(lab, "cmpl-1")
        whole_truth = finished_truth(lab, "whole-1")
        _, whole_down = sink.edges("whole-1")
    assert streamed.done
    assert streamed.text == "".join(answer(streamed_truth))
    assert streamed.chunks[0][1].kind is EventKind.CONTENT  # completions have no role chunk
    assert whole.status == 200
    whole_answer = whole.json()
    assert whole_answer["choices"][0]["message"]["content"] == "".join(answer(whole_truth))
    assert whole.headers["x-request-id"] == "whole-1"
    assert int(whole_down.text_mask.sum()) == 1
    assert whole_down.outcome is Outcome.COMPLETE
    assert status == 200
    assert b'"lab"' in models
    assert health_status == 200
