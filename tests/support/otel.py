"""What the OpenTelemetry tests share: an exporter whose spans and metrics stay in memory
(the SDK's own InMemorySpanExporter and InMemoryMetricReader), and a finished stream's two
edges as the gateway records them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steadystream import Outcome, Timeline, Where
from steadystream.otel import Call, OtelSettings, open_exporter
from steadystream.otel.sdk import OtelExporter
from tests.support.timelines import MS, make_timeline


@dataclass
class Captured:
    """An exporter, and where what it exports lands."""

    exporter: OtelExporter
    spans_out: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> tuple[ReadableSpan, ...]:
        assert self.exporter.flush()
        return self.spans_out.get_finished_spans()

    def metrics(self) -> dict[str, Any]:
        """Every metric by name: its points (data points with attributes)."""
        data = self.reader.get_metrics_data()
        found: dict[str, Any] = {}
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found


def captured(**settings: Any) -> Captured:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    exporter = open_exporter(
        OtelSettings(endpoint="http://127.0.0.1:4318", **settings),
        span_exporter=spans,
        metric_reader=reader,
    )
    return Captured(exporter, spans, reader)


START = 1_700_000_000.0
CALL = Call(
    operation="chat",
    provider="openai",
    streaming=True,
    request_model="lab",
    response_model="lab-v2",
    metric_model="lab",
    server_address="10.0.0.5",
    server_port=8000,
)
FAILOVER = {
    "at_ns": 500 * MS,
    "after_tokens": 3,
    "cause": "stall",
    "message": "upstream said: the prompt was 'my secret plan'",
    "from": "primary",
    "to": "fallback",
    "kind": "continue",
    "result": "completed",
}


def edge(where: Where, content_ms: list[float], outcome: Outcome = Outcome.COMPLETE) -> Timeline:
    timeline = make_timeline(
        content_ms,
        stream_id="req-1",
        where=where,
        outcome=outcome,
        labels={"model": "lab", "route": "chat", "tenant": "web", "upstream": "fallback"},
    ).replace(
        started_at=START,
        end_ns=round(content_ms[-1] * MS) + 5 * MS,
        usage={"prompt_tokens": 12, "completion_tokens": len(content_ms)},
    )
    timeline.meta.update(
        {"attempts": [{"upstream": "primary"}, {"upstream": "fallback"}], "failovers": [FAILOVER]}
    )
    return timeline
