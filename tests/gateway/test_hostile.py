"""Hostile upstreams and clients (issue 11): each case was a finding of an adversarial probe.

The upstream is :class:`~tests.support.hostile.HostileUpstream`: it echoes its key in every
place an upstream can put text, says "stop" and then holds the connection, sends events and
bodies of any size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from steadystream import Outcome
from steadystream.gateway import GatewayServer, TimelineRecorder
from tests.support.gateway import MemorySink, chat_body, gateway_config, get, post
from tests.support.hostile import HostileUpstream

pytestmark = pytest.mark.integration

SECRET = "sk-upstream-very-secret-0042"
ENV = {"UPSTREAM_KEY": SECRET}


def hostile(upstream: HostileUpstream) -> dict[str, Any]:
    return {"name": "hostile", "base_url": upstream.base_url, "api_key_env": "UPSTREAM_KEY"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with HostileUpstream() as server:
        yield server


def test_the_key_never_leaks_from_any_place_an_upstream_puts_text(
    upstream: HostileUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    recorder = TimelineRecorder(tmp_path, keep_text=True)
    answers = {}
    config = gateway_config(hostile(upstream), recording={"keep_text": True})
    with GatewayServer(config, recorder=recorder, env=ENV) as gw:
        for mode in ("error-event", "bad-chunk", "content-echo"):  # mid-stream, and the answer
            answers[mode] = post(gw.base_url, "/chat/completions", chat_body(5, hostile=mode))
        paced = chat_body(5, hostile="content-echo")
        answers["paced"] = post(
            gw.base_url, "/chat/completions", paced, {"X-Steadystream-Pacer": "leaky"}
        )
        for mode in ("status", "rate-limit", "header", "content-echo-whole"):
            body = chat_body(5, hostile=mode, stream=False)
            answers[mode] = post(gw.base_url, "/chat/completions", body)
        _, metrics = get(gw.url, "/metrics")
    recorder.close()
    assert "you sent key ***" in (answers["error-event"].error or "")
    assert "***" in (answers["bad-chunk"].error or "")
    assert "you sent key ***" in answers["content-echo"].text
    assert "you sent key ***" in answers["paced"].text
    assert b"you sent key ***" in answers["content-echo-whole"].body
    assert answers["status"].status == 500
    assert answers["header"].status == 200
    assert answers["header"].headers["content-type"] == "application/json"  # not the echo
    recordings = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    assert b"you sent key ***" in recordings  # the messages are recorded, scrubbed
    assert "you sent key ***" in caplog.text
    places = {
        **{f"client {mode}": a.body + orjson.dumps(a.headers) for mode, a in answers.items()},
        "metrics": metrics,
        "logs": caplog.text.encode(),
        "recordings": recordings,
    }
    for where, data in places.items():
        assert SECRET.encode() not in data, where


def test_a_finish_then_silence_is_ended_by_the_gateway(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    config = gateway_config(hostile(upstream), watchdog={"finish_timeout": "300ms"})
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = post(
            gw.base_url,
            "/chat/completions",
            chat_body(5, hostile="finish-silence"),
            {"X-Request-Id": "silent"},
            timeout=10,
        )
        _, down = sink.edges("silent")
    assert streamed.done  # the client got its [DONE]...
    assert streamed.error is None  # ...and no error: the answer was whole
    assert streamed.text == "one two three "
    assert down.outcome is Outcome.COMPLETE
    # ended by the finish deadline: not by the upstream's close after 60 s, nor the give-up
    assert down.meta["ended_by_gateway"] == (
        "no [DONE] nor end of the body within 300.0ms of the finish reason"
    )
    assert down.meta["attempts"][0]["failure"] == "silent-after-finish"


def test_a_close_after_the_finish_reason_completes_the_answer_without_failing_over(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    fallback = {**hostile(upstream), "name": "fallback", "priority": 1}
    config = gateway_config(hostile(upstream), fallback)
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = post(
            gw.base_url,
            "/chat/completions",
            chat_body(5, hostile="finish-close"),
            {"X-Request-Id": "closed"},
        )
        _, down = sink.edges("closed")
    assert streamed.done
    assert streamed.error is None
    assert streamed.text == "one two three "  # not continued: the answer had ended
    assert down.outcome is Outcome.COMPLETE
    assert down.meta["failovers"] == []
    assert "without [DONE]" in down.meta["ended_by_gateway"]


def test_a_non_streaming_answer_past_max_response_bytes_is_refused_clearly(
    upstream: HostileUpstream,
) -> None:
    config = gateway_config(hostile(upstream), limits={"max_response_bytes": "64KiB"})
    with GatewayServer(config, env=ENV) as gw:
        small = post(
            gw.base_url,
            "/chat/completions",
            chat_body(5, hostile="big-body", size=10_000, stream=False),
        )
        big = post(
            gw.base_url,
            "/chat/completions",
            chat_body(5, hostile="big-body", size=5_000_000, stream=False),
        )
    assert small.status == 200
    assert len(small.json()["choices"][0]["message"]["content"]) == 10_000
    assert big.status == 502
    error = big.json()["error"]
    assert error["code"] == "upstream_response_too_large"
    assert "limits.max_response_bytes (65536 bytes)" in error["message"]


@pytest.mark.parametrize("mode", ["big-event", "endless-line"])
def test_an_oversized_event_fails_its_stream_in_band(
    upstream: HostileUpstream, sink: MemorySink, mode: str
) -> None:
    config = gateway_config(hostile(upstream), limits={"max_event_bytes": "256KiB"})
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = post(
            gw.base_url,
            "/chat/completions",
            chat_body(5, hostile=mode, size=4_000_000),
            {"X-Request-Id": mode},
            timeout=20,
        )
        _, down = sink.edges(mode)
    assert streamed.status == 200
    assert streamed.text == "one two three "  # what came before it was relayed
    assert streamed.done
    assert "limits.max_event_bytes" in (streamed.error or "")
    assert down.outcome is Outcome.ERROR
    assert down.meta["attempts"][0]["failure"] == "oversized-event"
    # The half event held counts in the buffer peak (the limit plus at most one socket read).
    assert 256 * 1024 < down.meta["buffer_peak_bytes"] <= 2 * 256 * 1024  # + one read


def test_a_429_keeps_its_retry_after(upstream: HostileUpstream) -> None:
    config = gateway_config(hostile(upstream), failover={"retry_statuses": [500]})
    with GatewayServer(config, env=ENV) as gw:
        refused = post(
            gw.base_url, "/chat/completions", chat_body(5, hostile="rate-limit", stream=False)
        )
        streamed = post(gw.base_url, "/chat/completions", chat_body(5, hostile="rate-limit"))
    for answer in (refused, streamed):
        assert answer.status == 429
        assert answer.headers["retry-after"] == "7"
        assert "x-echo" not in answer.headers
        assert answer.json()["error"]["code"] == "upstream_429"
