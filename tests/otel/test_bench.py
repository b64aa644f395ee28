"""bench's side: each recorded stream as a client span, beside the output file."""

from __future__ import annotations

from steadystream.bench.endpoint import Endpoint
from steadystream.bench.telemetry import BenchTelemetry, bench_telemetry
from steadystream.timeline import Timeline
from tests.support.otel import Captured
from tests.support.timelines import make_timeline


def test_each_stream_is_a_client_span_beside_the_file(otel: Captured) -> None:
    endpoint = Endpoint(base_url="https://llm.example.com/v1", model="m1", kind="messages",
                        api_key="sk-bench-secret")  # fmt: skip
    telemetry = BenchTelemetry(otel.exporter, endpoint)
    written: list[Timeline] = []
    sink = telemetry.beside(written.append)
    timeline = make_timeline([100, 130, 700], stream_id="ss1-000001").replace(started_at=1.7e9)
    sink(timeline)
    telemetry.close()
    assert written == [timeline]
    (span,) = otel.spans()
    a = dict(span.attributes or {})
    assert span.name == "chat m1"
    assert (a["server.address"], a["server.port"]) == ("llm.example.com", 443)
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["steadystream.request_id"] == "ss1-000001"
    assert a["steadystream.stream.stalls"] == 1
    assert a["steadystream.where"] == "client"
    assert "sk-bench-secret" not in repr(a)
    assert "gen_ai.server.time_to_first_token" not in otel.metrics()  # a client is no server


def test_off_unless_an_endpoint_is_given() -> None:
    endpoint = Endpoint(base_url="http://127.0.0.1:8000/v1", model="m")
    assert bench_telemetry(endpoint, {}) is None
    assert bench_telemetry(endpoint, {"OTEL_SDK_DISABLED": "true"}, "http://c:4318") is None
