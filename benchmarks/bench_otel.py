"""What OpenTelemetry export costs the gateway's event loop per finished stream.

    .venv/bin/python benchmarks/bench_otel.py

A 200-chunk stream (both edges) is turned into its span and observations (pure, numpy) and
handed to the SDK (span made, ~10 metric records and one per chunk); the SDK's own threads
export (here to its in-memory exporter and reader, so no network is timed). Result in
docs/performance.md.
"""

from __future__ import annotations

import time

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steadystream import Event, EventKind, Timeline, Where
from steadystream.otel import Call, OtelSettings, gateway_stream, open_exporter

STREAMS = 500
CHUNKS = 200


def edge(where: Where, shift_ns: int) -> Timeline:
    events = [
        Event(20_000_000 * (i + 1) + shift_ns, "w ", 1, EventKind.CONTENT) for i in range(CHUNKS)
    ]
    timeline = Timeline.from_events(events, stream_id="s", where=where, labels={"model": "lab"})
    return timeline.replace(started_at=time.time(), end_ns=20_000_000 * (CHUNKS + 2))


def main() -> None:
    up, down = edge(Where.GATEWAY_UPSTREAM, 0), edge(Where.GATEWAY_DOWNSTREAM, 50_000)
    call = Call("chat", "openai", True, "lab", "lab", "lab", "127.0.0.1", 8000)
    exporter = open_exporter(
        OtelSettings(endpoint="http://127.0.0.1:4318", max_queue_spans=STREAMS * 2),
        span_exporter=InMemorySpanExporter(),
        metric_reader=InMemoryMetricReader(),
    )
    convert = export = 0
    for _ in range(STREAMS):
        t0 = time.perf_counter_ns()
        span, measures = gateway_stream(up, down, call)
        t1 = time.perf_counter_ns()
        exporter.export_stream(span, measures)
        t2 = time.perf_counter_ns()
        convert += t1 - t0
        export += t2 - t1
    exporter.shutdown()
    print(
        f"{STREAMS} streams of {CHUNKS} chunks: per stream, conversion"
        f" {convert / STREAMS / 1e3:.0f} us, SDK hand-off {export / STREAMS / 1e3:.0f} us"
    )


if __name__ == "__main__":
    main()
