"""A hostile client's model name, from a review of the export: a stream's telemetry holds
no unbounded string, and the metrics no label value a client chose."""

from __future__ import annotations

from starlette.datastructures import Headers

from steadystream import Timeline, Where
from steadystream.gateway.telemetry import GatewayTelemetry
from steadystream.otel import Call, gateway_stream
from tests.support.gateway import gateway_config
from tests.support.otel import Captured
from tests.support.timelines import make_timeline

HOSTILE = "m" * 100_000 + "-sk-not-a-model"


def _edges() -> tuple[Timeline, Timeline]:
    labels = {"model": HOSTILE, "route": "chat", "upstream": "engine"}
    up = make_timeline(
        [100.0, 120.0, 140.0], stream_id="r", where=Where.GATEWAY_UPSTREAM, labels=labels
    )
    down = make_timeline(
        [101.0, 121.0, 141.0], stream_id="r", where=Where.GATEWAY_DOWNSTREAM, labels=labels
    )
    return up, down


def test_a_clients_model_name_never_becomes_a_metric_label() -> None:
    # What gateway/telemetry.py builds for an upstream with no model_map: the upstream's name
    # for the model is the client's own, and the metric label is the bounded one ("other").
    call = Call(
        operation="chat",
        provider="openai",
        streaming=True,
        request_model=HOSTILE,
        response_model=HOSTILE,
        metric_model="other",
    )
    up, down = _edges()
    _, measures = gateway_stream(up, down, call)
    assert measures.attributes["gen_ai.request.model"] == "other"
    assert measures.attributes.get("gen_ai.response.model") in (None, "other")
    assert all(HOSTILE not in str(v) for v in measures.attributes.values())


def test_a_clients_model_name_is_cut_short_in_the_span() -> None:
    call = Call(operation="chat", provider="openai", streaming=True, request_model=HOSTILE,
                response_model=HOSTILE, metric_model="other")  # fmt: skip
    up, down = _edges()
    span, _ = gateway_stream(up, down, call)
    assert len(span.name) <= 300
    longest = max(len(v) for v in span.attributes.values() if isinstance(v, str))
    assert longest <= 256
    assert span.attributes["gen_ai.request.model"].startswith("mmmm")


def test_a_mapped_response_model_stays_a_metric_label() -> None:
    call = Call(operation="chat", provider="openai", streaming=True, request_model="lab",
                response_model="lab-7b", metric_model="lab")  # fmt: skip
    up, down = _edges()
    _, measures = gateway_stream(up, down, call)
    assert measures.attributes["gen_ai.response.model"] == "lab-7b"


def test_two_traceparent_headers_start_a_new_trace(otel: Captured) -> None:
    # W3C trace-context's test suite (test_traceparent_duplicated): a request with two
    # traceparent headers gets a new trace id, as one with an invalid header does.
    config = gateway_config({"name": "engine", "base_url": "http://127.0.0.1:9/v1"})
    telemetry = GatewayTelemetry(otel.exporter, config)
    try:
        one = f"00-{'1' * 32}-{'2' * 16}-01"
        other = f"00-{'3' * 32}-{'4' * 16}-01"
        both = Headers(raw=[(b"traceparent", one.encode()), (b"traceparent", other.encode())])
        traced = telemetry.begin(both, streaming=True)
        assert traced.context.parent_span_id is None
        assert traced.context.trace_id not in (int("1" * 32, 16), int("3" * 32, 16))
        single = telemetry.begin(Headers(raw=[(b"traceparent", one.encode())]), streaming=True)
        assert single.context.parent_span_id == int("2" * 16, 16)
    finally:
        telemetry.close()


def test_a_stream_that_stalls_all_the_time_keeps_a_bounded_span() -> None:
    from steadystream.otel.streams import MAX_STALL_EVENTS

    labels = {"model": "lab", "route": "chat", "upstream": "engine"}
    times = [100.0 + 1_000.0 * i for i in range(500)]  # 499 one-second stalls
    up = make_timeline(times, stream_id="r", where=Where.GATEWAY_UPSTREAM, labels=labels)
    down = make_timeline(
        [t + 1 for t in times], stream_id="r", where=Where.GATEWAY_DOWNSTREAM, labels=labels
    )
    call = Call(operation="chat", provider="openai", streaming=True, request_model="lab",
                response_model="lab", metric_model="lab")  # fmt: skip
    span, _ = gateway_stream(up, down, call)
    assert span.attributes["steadystream.stream.stalls"] == 499
    stalls = [event for event in span.events if event.name == "steadystream.stall"]
    assert len(stalls) == MAX_STALL_EVENTS
    assert len(span.attributes["steadystream.stream.stall_causes"]) == MAX_STALL_EVENTS
