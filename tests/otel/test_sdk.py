"""The SDK edge: names, bucket bounds, attributes, the client's trace continued, and a
collector that is away costing a bounded queue and a counter."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from steadystream import Outcome, Where
from steadystream.otel import begin_trace, gateway_stream
from steadystream.otel.conventions import (
    CHUNK_BUCKETS,
    DURATION_BUCKETS,
    METRICS,
    SERVER_TPOT_BUCKETS,
    SERVER_TTFT_BUCKETS,
    TOKEN_BUCKETS,
)
from tests.support.otel import CALL, Captured, captured, edge

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def one_stream(outcome: Outcome = Outcome.COMPLETE) -> tuple[object, object]:
    up = edge(Where.GATEWAY_UPSTREAM, [100, 120, 140, 600, 620], outcome)
    down = edge(Where.GATEWAY_DOWNSTREAM, [101, 121, 141, 701, 721], outcome)
    return gateway_stream(up, down, CALL)


def test_the_conventions_bounds_are_the_published_ones() -> None:
    # gen-ai-metrics.md, semantic conventions v1.41.0 (now semantic-conventions-genai)
    assert DURATION_BUCKETS == CHUNK_BUCKETS == (
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    )  # fmt: skip
    assert TOKEN_BUCKETS == (
        1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
        67108864,
    )  # fmt: skip
    assert SERVER_TTFT_BUCKETS == (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0,
    )  # fmt: skip
    assert SERVER_TPOT_BUCKETS == (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    )  # fmt: skip


def test_a_stream_makes_one_span_continuing_the_clients_trace(otel: Captured) -> None:
    trace = otel.exporter.begin(f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "congo=t61")
    span, measures = one_stream()
    otel.exporter.export_stream(span, measures, trace)  # type: ignore[arg-type]
    (made,) = otel.spans()
    assert made.name == "chat lab"
    assert made.kind is SpanKind.CLIENT
    assert f"{made.context.trace_id:032x}" == CLIENT_TRACE
    assert made.parent is not None
    assert f"{made.parent.span_id:016x}" == CLIENT_SPAN
    assert made.context.span_id == trace.span_id  # the id the upstream request carried
    assert made.context.trace_state.to_header() == "congo=t61"
    assert made.start_time == span.start_unix_ns  # type: ignore[attr-defined]
    assert made.attributes is not None
    assert made.attributes["steadystream.stream.stalls"] == 1
    assert list(made.attributes["steadystream.stream.stall_causes"]) == ["stall"]
    assert [e.name for e in made.events] == ["steadystream.failover", "steadystream.stall"]
    assert made.status.status_code is StatusCode.UNSET
    assert made.resource.attributes["service.name"] == "steadystream"


def test_a_failed_stream_has_error_status(otel: Captured) -> None:
    span, measures = one_stream(Outcome.TRUNCATED)
    otel.exporter.export_stream(span, measures)  # type: ignore[arg-type]
    (made,) = otel.spans()
    assert made.status.status_code is StatusCode.ERROR
    assert made.attributes is not None
    assert made.attributes["error.type"] == "truncated"
    assert made.parent is None  # no client trace: a root span


def test_the_metrics_have_the_conventions_names_bounds_and_attributes(otel: Captured) -> None:
    for _ in range(2):
        span, measures = one_stream()
        otel.exporter.export_stream(span, measures)  # type: ignore[arg-type]
    metrics = otel.metrics()
    for name, spec in METRICS.items():
        assert name in metrics, name
        metric = metrics[name]
        assert metric.unit == spec.unit
        for point in metric.data.data_points:
            if spec.kind == "histogram":
                assert tuple(point.explicit_bounds) == spec.buckets
            assert point.attributes["gen_ai.operation.name"] == "chat"
            assert point.attributes["gen_ai.provider.name"] == "openai"
            assert point.attributes["gen_ai.request.model"] == "lab"
            assert point.attributes["server.address"] == "10.0.0.5"
            assert point.attributes["server.port"] == 8000

    def points(name: str) -> list[object]:
        return list(metrics[name].data.data_points)

    (per_chunk,) = points("gen_ai.client.operation.time_per_output_chunk")
    assert per_chunk.count == 2 * 4  # every chunk after the first, of both streams
    assert per_chunk.sum == pytest.approx(2 * 0.52)
    (first,) = points("gen_ai.client.operation.time_to_first_chunk")
    assert (first.count, first.sum) == (2, pytest.approx(0.2))
    usage = {p.attributes["gen_ai.token.type"]: p.sum for p in points("gen_ai.client.token.usage")}
    assert usage == {"input": 24, "output": 10}
    (ttft,) = points("gen_ai.server.time_to_first_token")
    assert ttft.sum == pytest.approx(0.202)
    (stalls,) = points("steadystream.stream.stalls")
    assert stalls.value == 2
    (streams,) = points("steadystream.streams")
    assert (streams.value, streams.attributes["steadystream.outcome"]) == (2, "complete")
    (dropped,) = points("steadystream.otel.dropped_spans")
    assert dropped.value == 0


class _Stuck(SpanExporter):
    """A collector that does not answer until told to, then refuses."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches += 1
        self.release.wait(10)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.release.set()


def test_a_collector_that_is_away_costs_a_bounded_queue_and_a_counter() -> None:
    stuck = _Stuck()
    capture = captured(max_queue_spans=3)
    capture.exporter._counted.inner = stuck  # the exporter the batch processor calls
    try:
        for _ in range(10):
            span, measures = one_stream()
            capture.exporter.export_stream(span, measures)  # type: ignore[arg-type]
        assert capture.exporter.dropped_spans == 7  # three wait; the rest never queue
        stuck.release.set()
        capture.exporter.flush(5_000)
        assert capture.exporter.lost_spans == 10  # and the three were refused
    finally:
        capture.exporter.shutdown()


def test_an_unsampled_client_trace_is_not_exported_but_passed_on(otel: Captured) -> None:
    trace = otel.exporter.begin(f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00")
    assert trace.headers()["traceparent"].endswith("-00")
    span, measures = one_stream()
    otel.exporter.export_stream(span, measures, trace)  # type: ignore[arg-type]
    assert otel.spans() == ()
    assert otel.exporter.lost_spans == 0  # not sampled is not lost
    assert begin_trace(None).sampled
