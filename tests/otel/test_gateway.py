"""The gateway's spans: one per stream, inside the client's trace, with the gateway's span as
the upstream request's parent, and nothing secret in them."""

from __future__ import annotations

import socket
import time

import orjson
import pytest

from steadystream.gateway import GatewayServer
from steadystream.gateway.telemetry import GatewayTelemetry
from steadystream.lab import LabServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, post, upstream, wait_for
from tests.support.otel import Captured
from tests.support.scripted import ScriptedServer

pytestmark = pytest.mark.integration

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
UPSTREAM_KEY = "sk-upstream-0123456789abcdef"
GATEWAY_KEY = "gw-tenant-key-9876543210"


def _chunk(delta: dict[str, str], finish: str | None = None, **extra: object) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "lab-7b"}
    return b"data: " + orjson.dumps({**chunk, "choices": [choice], **extra}) + b"\n\n"


def _answers_with_a_pause(peer: socket.socket) -> None:
    peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    peer.sendall(_chunk({"role": "assistant"}))
    for word in ("a ", "b ", "c "):
        peer.sendall(_chunk({"content": word}))
        time.sleep(0.01)
    time.sleep(0.5)  # one stall (the threshold is 400 ms)
    peer.sendall(_chunk({"content": "d "}, "stop"))
    usage = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    peer.sendall(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
    peer.sendall(b"data: [DONE]\n\n")


def test_the_clients_trace_is_continued_and_passed_upstream(otel: Captured) -> None:
    scripted = ScriptedServer(_answers_with_a_pause)
    config = gateway_config(
        {
            "name": "engine",
            "base_url": f"http://127.0.0.1:{scripted.port}/v1",
            "api_key_env": "UPSTREAM_KEY",
            "model_map": {"lab": "lab-7b"},
        },
        tenants=[{"name": "web", "api_key_env": ["WEB_KEY"]}],
        watchdog={"stall_timeout": "2s"},
    )
    env = {"UPSTREAM_KEY": UPSTREAM_KEY, "WEB_KEY": GATEWAY_KEY}
    try:
        with GatewayServer(config, env=env) as gateway:
            telemetry = gateway.state.telemetry = GatewayTelemetry(otel.exporter, config)
            streamed = post(
                gateway.base_url,
                "/chat/completions",
                chat_body(stream_options={"include_usage": True}),
                {
                    "Authorization": f"Bearer {GATEWAY_KEY}",
                    "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
                    "tracestate": "app=checkout",
                },
                timeout=10,
            )
            spans = wait_for(lambda: otel.spans() or None, what="the gateway's span")
    finally:
        scripted.close()
    telemetry.close()
    assert streamed.status == 200
    (span,) = spans
    assert f"{span.context.trace_id:032x}" == CLIENT_TRACE
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == CLIENT_SPAN
    # the upstream request carried the gateway span as its parent
    (request,) = scripted.requests
    head = request.split(b"\r\n\r\n")[0].decode().lower()
    assert f"traceparent: 00-{CLIENT_TRACE}-{span.context.span_id:016x}-01" in head
    assert "tracestate: app=checkout" in head

    a = dict(span.attributes or {})
    assert a["steadystream.request_id"] == streamed.headers["x-request-id"]
    assert a["gen_ai.request.model"] == "lab"
    assert a["gen_ai.response.model"] == "lab-7b"  # the upstream's name for it
    assert (a["server.address"], a["server.port"]) == ("127.0.0.1", scripted.port)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (9, 4)
    assert a["gen_ai.request.stream"] is True
    assert 0 < a["gen_ai.response.time_to_first_chunk"] < 5
    assert a["steadystream.stream.stalls"] == 1
    assert a["steadystream.stream.worst_gap"] >= 0.5
    assert a["steadystream.tenant"] == "web"
    assert [e.name for e in span.events] == ["steadystream.stall"]

    # nothing secret anywhere: not in attributes, events, resource, nor metric attributes
    everything = repr(
        (a, [(e.name, dict(e.attributes or {})) for e in span.events], span.resource.attributes)
    )
    metrics = otel.metrics()
    everything += repr([dict(p.attributes) for m in metrics.values() for p in m.data.data_points])
    for secret in (UPSTREAM_KEY, GATEWAY_KEY, "Tell me about steady streams", "a b c d"):
        assert secret not in everything
    assert "gen_ai.client.operation.time_per_output_chunk" in metrics


def test_one_span_per_stream_through_the_lab(otel: Captured) -> None:
    sink = MemorySink()
    with LabServer("steady", seed=3) as lab:
        config = gateway_config(upstream(lab, "lab"))
        with GatewayServer(config, recorder=sink) as gateway:
            telemetry = gateway.state.telemetry = GatewayTelemetry(otel.exporter, config)
            ids = []
            for max_tokens in (5, 8, 11):
                streamed = post(gateway.base_url, "/chat/completions", chat_body(max_tokens))
                assert streamed.status == 200
                ids.append(streamed.headers["x-request-id"])
            whole = post(gateway.base_url, "/chat/completions", chat_body(4, stream=False))
            assert whole.status == 200
            ids.append(whole.headers["x-request-id"])
            spans = wait_for(lambda: s if len(s := otel.spans()) >= 4 else None, what="4 spans")
    telemetry.close()
    by_id = {span.attributes["steadystream.request_id"]: span for span in spans}  # type: ignore[index]
    assert sorted(by_id) == sorted(ids)
    assert len({span.context.trace_id for span in spans}) == 4  # no client trace: four roots
    for request_id, span in by_id.items():
        a = span.attributes or {}
        assert a["steadystream.outcome"] == "complete"
        if request_id == whole.headers["x-request-id"]:  # one answer whole: no chunks, no gaps
            assert a["gen_ai.request.stream"] is False
            assert "steadystream.stream.worst_gap" not in a
            continue
        assert a["gen_ai.request.stream"] is True
        down = sink.edges(request_id)[1]
        times = down.times[down.text_mask]
        worst = float((times[1:] - times[:-1]).max()) / 1e9
        assert a["steadystream.stream.worst_gap"] == pytest.approx(worst)
