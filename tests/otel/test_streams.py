"""A finished stream as a span and observations (pure: no SDK)."""

from __future__ import annotations

import pytest

from steadystream import Outcome, Where
from steadystream.otel import Call, client_stream, gateway_stream
from tests.support.otel import CALL, START, edge
from tests.support.timelines import MS, make_timeline


def test_a_gateway_stream_carries_the_conventions_and_ours() -> None:
    up = edge(Where.GATEWAY_UPSTREAM, [100, 120, 140, 600, 620])
    down = edge(Where.GATEWAY_DOWNSTREAM, [101, 121, 141, 701, 721])
    span, measures = gateway_stream(up, down, CALL)
    a = span.attributes
    assert span.name == "chat lab"
    assert span.start_unix_ns == round(START * 1e9)
    assert span.end_unix_ns - span.start_unix_ns == 726 * MS
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "openai"
    assert a["gen_ai.request.model"] == "lab"
    assert a["gen_ai.response.model"] == "lab-v2"
    assert a["gen_ai.request.stream"] is True
    assert a["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.100)  # the upstream's
    assert a["gen_ai.usage.input_tokens"] == 12
    assert a["gen_ai.usage.output_tokens"] == 5
    assert (a["server.address"], a["server.port"]) == ("10.0.0.5", 8000)
    assert a["steadystream.stream.ttft"] == pytest.approx(0.101)  # what the client saw
    assert a["steadystream.stream.worst_gap"] == pytest.approx(0.560)
    assert a["steadystream.upstream.worst_gap"] == pytest.approx(0.460)
    assert a["steadystream.stream.stalls"] == 1
    assert a["steadystream.stream.stall_causes"] == ["stall"]  # the failover inside the gap
    assert a["steadystream.failover.attempts"] == 2
    assert a["steadystream.failover.count"] == 1
    assert a["steadystream.outcome"] == "complete"
    assert (a["steadystream.route"], a["steadystream.tenant"]) == ("chat", "web")
    assert "error.type" not in a
    stall, failover = sorted(span.events, key=lambda e: e.name)[::-1]
    assert stall.name == "steadystream.stall"
    assert stall.unix_ns - span.start_unix_ns == 701 * MS
    assert stall.attributes == {
        "steadystream.stall.duration": pytest.approx(0.560),
        "steadystream.stall.chunk_index": 3,
        "steadystream.stall.cause": "stall",
    }
    assert failover.name == "steadystream.failover"
    assert failover.unix_ns - span.start_unix_ns == 500 * MS
    assert failover.attributes["steadystream.failover.to"] == "fallback"
    assert not any("secret" in str(v) for e in span.events for v in e.attributes.values())
    assert not any("secret" in str(v) for v in a.values())  # upstream text stays out

    assert measures.time_to_first_chunk_s == pytest.approx(0.100)
    assert measures.chunk_gaps_s.tolist() == pytest.approx([0.02, 0.02, 0.46, 0.02])
    assert measures.server_ttft_s == pytest.approx(0.101)
    assert measures.server_tpot_s == pytest.approx(0.620 / 4)
    assert measures.worst_gap_s == pytest.approx(0.560)
    assert measures.stalls == 1
    assert measures.attributes["gen_ai.request.model"] == "lab"
    assert "steadystream.outcome" not in measures.attributes  # metric attributes stay bounded


def test_a_failed_stream_is_an_error_with_no_server_metrics() -> None:
    up = edge(Where.GATEWAY_UPSTREAM, [100, 120], Outcome.ERROR)
    down = edge(Where.GATEWAY_DOWNSTREAM, [101, 121], Outcome.ERROR)
    span, measures = gateway_stream(up, down, CALL)
    assert span.error_type == span.attributes["error.type"] == "error"
    assert measures.error_type == "error"
    assert measures.server_ttft_s is None
    assert measures.server_tpot_s is None


def test_a_stall_without_a_failover_has_an_unknown_cause_and_a_whole_answer_no_chunks() -> None:
    client = make_timeline([100, 900, 920], stream_id="b-1").replace(started_at=START)
    span, measures = client_stream(client, CALL)
    assert span.attributes["steadystream.stream.stall_causes"] == ["unknown"]
    assert "steadystream.upstream.worst_gap" not in span.attributes
    assert measures.server_ttft_s is None  # a client is no server
    whole = Call(operation="text_completion", provider="openai", streaming=False,
                 request_model="lab")  # fmt: skip
    span, measures = client_stream(client, whole)
    assert span.attributes["gen_ai.request.stream"] is False
    assert "gen_ai.response.time_to_first_chunk" not in span.attributes
    assert measures.time_to_first_chunk_s is None
    assert len(measures.chunk_gaps_s) == 0
