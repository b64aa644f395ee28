"""The edge to the OpenTelemetry SDK: finished streams in, OTLP out.

Only this module imports OpenTelemetry, and only :func:`steadystream.otel.open_exporter`
imports it, when telemetry is on. Its providers are its own (never the global ones the SDK
offers: an app that embeds the gateway keeps its own).

Nothing here runs on the relay's path. A stream is handed over once, when it has ended
(:meth:`OtelExporter.export_stream`): its span is made with the times it had, and its
observations are recorded; the SDK's :class:`BatchSpanProcessor` sends spans from its own
thread, and its :class:`PeriodicExportingMetricReader` the metrics, every
``metrics_interval_ms``. Spans waiting for export are bounded by ``max_queue_spans``: one
more is dropped and counted (:attr:`OtelExporter.dropped_spans`), as is every span of a batch
the collector did not take (it was down, or refused it), so a collector that is away costs a
bounded memory and a counter, never a wait.

:meth:`OtelExporter.shutdown` sends what is left and is bounded in all by
``shutdown_timeout_ms`` (5 s), whatever the collector does (refuses, never answers, answers
503): each export gives up after ``export_timeout_ms``, and what is still waiting then is
let go and counted. What did not reach the collector is said in one log line
(:mod:`.exporters` keeps the SDK's retry lines quiet).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from steadystream.__about__ import __version__
from steadystream._validation import shown_url
from steadystream.otel.conventions import METRICS
from steadystream.otel.exporters import (
    Counted,
    CountedMetrics,
    CountedSpans,
    otlp_metrics,
    otlp_spans,
)
from steadystream.otel.settings import OtelSettings
from steadystream.otel.streams import StreamMeasures, StreamSpan
from steadystream.otel.traceparent import TraceContext, begin_trace

__all__ = ["OtelExporter"]

_SCOPE = "steadystream"

log = logging.getLogger("steadystream.otel")


class OtelExporter:
    """Spans and GenAI metrics of finished streams, to an OTLP collector.

    ``span_exporter`` and ``metric_reader`` replace the OTLP ones (tests pass the SDK's
    in-memory exporter and reader); by default they are built from ``settings``.
    ``metric_exporter`` replaces only the OTLP metric exporter (read every
    ``metrics_interval_ms``). ``clock`` (monotonic seconds) times the shutdown's bound.
    """

    def __init__(
        self,
        settings: OtelSettings,
        *,
        span_exporter: SpanExporter | None = None,
        metric_reader: MetricReader | None = None,
        metric_exporter: MetricExporter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock
        resource = Resource.create({**settings.resource, "service.name": settings.service_name})
        self._ids = _ChosenIds()
        self._lock = threading.Lock()
        self._warned = threading.Event()
        if span_exporter is None and not settings.traces:
            span_exporter = _Unsent()
        self._spans_out = Counted(lambda: self._first_failure("spans"))
        self._counted = CountedSpans(
            span_exporter or otlp_spans(settings, self._spans_out), self._spans_out
        )
        self._metrics_out = Counted(lambda: self._first_failure("metrics"))
        self.dropped_spans = 0  # queue full (spans past max_queue_spans waiting)
        self._handed = 0
        self.tracer_provider = TracerProvider(resource=resource, id_generator=self._ids)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                self._counted,
                max_queue_size=settings.max_queue_spans,
                schedule_delay_millis=settings.span_delay_ms,
                max_export_batch_size=min(512, settings.max_queue_spans),
            )
        )
        self._tracer = self.tracer_provider.get_tracer(_SCOPE, __version__)
        readers = [metric_reader] if metric_reader is not None else []
        if metric_reader is None and settings.metrics:
            out = metric_exporter or otlp_metrics(settings, self._metrics_out)
            readers.append(
                PeriodicExportingMetricReader(
                    CountedMetrics(out, self._metrics_out),
                    export_interval_millis=settings.metrics_interval_ms,
                    export_timeout_millis=settings.export_timeout_ms,
                )
            )
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        meter = self.meter_provider.get_meter(_SCOPE, __version__)
        self._histograms = {
            name: meter.create_histogram(
                name, spec.unit, spec.description, explicit_bucket_boundaries_advisory=spec.buckets
            )
            for name, spec in METRICS.items()
            if spec.kind == "histogram"
        }
        self._counters = {
            name: meter.create_counter(name, spec.unit, spec.description)
            for name, spec in METRICS.items()
            if spec.kind == "counter"
        }
        meter.create_observable_counter(
            "steadystream.otel.dropped_spans",
            [self._observe_dropped],
            "{span}",
            "Spans not exported: the queue was full, or the collector did not take them.",
        )

    # -- the request's start ------------------------------------------------------------------

    def begin(self, traceparent: str | None, tracestate: str | None = None) -> TraceContext:
        """The ids of a request's span, chosen as it arrives: the upstream request carries
        them (``TraceContext.headers``) long before the span is made. The tracer's sampler
        decides, with the client's span as the parent, whether it is sampled."""
        trace = begin_trace(traceparent, tracestate)
        decision = self.tracer_provider.sampler.should_sample(
            _parent(trace), trace.trace_id, "", SpanKind.CLIENT
        )
        return replace(trace, sampled=decision.decision is Decision.RECORD_AND_SAMPLE)

    # -- the stream's end ---------------------------------------------------------------------

    def export_stream(
        self, span: StreamSpan, measures: StreamMeasures, trace: TraceContext | None = None
    ) -> None:
        """Make the stream's span and record its observations; never waits for the network."""
        self._record(measures)
        with self._lock:
            if self._handed - self._spans_out.settled >= self.settings.max_queue_spans:
                self.dropped_spans += 1
                return
            if trace is not None:
                self._ids.choose(trace.trace_id, trace.span_id)
            try:
                made = self._tracer.start_span(
                    span.name,
                    context=_parent(trace),
                    kind=SpanKind.CLIENT,
                    attributes=span.attributes,
                    start_time=span.start_unix_ns,
                )
            finally:
                self._ids.choose(None, None)
            if made.get_span_context().trace_flags.sampled:
                self._handed += 1
        for event in span.events:
            made.add_event(event.name, event.attributes, timestamp=event.unix_ns)
        if span.error_type is not None:
            made.set_status(Status(StatusCode.ERROR))
        made.end(end_time=span.end_unix_ns)

    def drop(self) -> None:
        """Count a span dropped before it was made (a full queue ahead of the SDK)."""
        with self._lock:
            self.dropped_spans += 1

    @property
    def lost_spans(self) -> int:
        """Spans that did not reach the collector: dropped here, or in a failed export."""
        return self.dropped_spans + self._spans_out.failed

    def flush(self, timeout_ms: int = 10_000) -> bool:
        """Export what is waiting now (spans and metrics); whether it all went out in time."""
        spans = self.tracer_provider.force_flush(timeout_ms)
        metrics = self.meter_provider.force_flush(timeout_ms)
        return spans and metrics

    def shutdown(self) -> None:
        """Export what is left and stop the exporters' threads, within
        ``settings.shutdown_timeout_ms`` whatever the collector does; then say, in one log
        line, what did not reach it (blocks: call it off the loop)."""
        budget_s = self.settings.shutdown_timeout_ms / 1000
        deadline = self._clock() + budget_s
        # The SDK's own shutdown waits for each export in turn (its force_flush ignores its
        # timeout), so it runs on a thread of its own and is waited for until the bound.
        closing = threading.Thread(
            target=self._close_providers, name="steadystream-otel-shutdown", daemon=True
        )
        closing.start()
        # Until an export's own timeout before the bound, the last exports may go out; then
        # what is still to send fails at once, and the one export under way gives up in time.
        closing.join(max(0.0, budget_s - self.settings.export_timeout_ms / 1000))
        if closing.is_alive():
            self._spans_out.cut_off()
            self._metrics_out.cut_off()
            closing.join(max(0.0, deadline - self._clock()))
        self._say_what_was_lost(finished=not closing.is_alive())

    def _close_providers(self) -> None:
        try:
            self.tracer_provider.shutdown()
            self.meter_provider.shutdown(timeout_millis=self.settings.shutdown_timeout_ms)
        except Exception:  # telemetry must never take the shutdown down with it
            log.exception("OpenTelemetry: the exporters did not shut down cleanly")

    def _first_failure(self, signal: str) -> None:
        if not self._warned.is_set():
            self._warned.set()
            log.warning(
                "OpenTelemetry: an export of %s to the collector at %s failed; failures are"
                " counted in steadystream.otel.dropped_spans and summed up at shutdown",
                signal,
                shown_url(self.settings.endpoint),
            )

    def _say_what_was_lost(self, *, finished: bool) -> None:
        spans, metrics = self._spans_out, self._metrics_out
        # spans handed to the SDK and never settled were still waiting when it was let go
        waiting = max(0, self._handed - spans.settled)
        lost = self.dropped_spans + spans.failed + waiting
        if lost == 0 and metrics.failed == 0:
            return
        log.warning(
            "OpenTelemetry: %d of %d spans and %d of %d metric exports did not reach the"
            " collector at %s%s",
            lost,
            self._handed + self.dropped_spans,
            metrics.failed,
            metrics.settled,
            shown_url(self.settings.endpoint),
            "" if finished else f" (shutdown cut short at {self.settings.shutdown_timeout_ms} ms)",
        )

    # -- metrics ------------------------------------------------------------------------------

    def _record(self, measures: StreamMeasures) -> None:
        histograms, counters = self._histograms, self._counters
        common = measures.attributes
        failed = common if measures.error_type is None else {
            **common, "error.type": measures.error_type
        }  # fmt: skip
        histograms["gen_ai.client.operation.duration"].record(measures.duration_s, failed)
        for kind, tokens in (("input", measures.input_tokens), ("output", measures.output_tokens)):
            if tokens is not None:
                histograms["gen_ai.client.token.usage"].record(
                    tokens, {**common, "gen_ai.token.type": kind}
                )
        counters["steadystream.streams"].add(
            1, {**common, "steadystream.outcome": measures.outcome}
        )
        if not measures.streaming:
            return
        _observe(histograms["gen_ai.client.operation.time_to_first_chunk"],
                 measures.time_to_first_chunk_s, common)  # fmt: skip
        per_chunk = histograms["gen_ai.client.operation.time_per_output_chunk"]
        for gap in measures.chunk_gaps_s.tolist():
            per_chunk.record(gap, common)
        _observe(histograms["gen_ai.server.time_to_first_token"], measures.server_ttft_s, common)
        _observe(histograms["gen_ai.server.time_per_output_token"], measures.server_tpot_s, common)
        _observe(histograms["steadystream.stream.worst_gap"], measures.worst_gap_s, common)
        _observe(histograms["steadystream.stream.p99_gap"], measures.p99_gap_s, common)
        if measures.stalls:
            counters["steadystream.stream.stalls"].add(measures.stalls, common)

    def _observe_dropped(self, options: CallbackOptions) -> Sequence[Observation]:
        return [Observation(self.lost_spans)]


def _observe(histogram: Any, value: float | None, attributes: dict[str, Any]) -> None:
    if value is not None:
        histogram.record(value, attributes)


def _parent(trace: TraceContext | None) -> Context | None:
    """The client's span as a remote parent, when there was one."""
    if trace is None or trace.parent_span_id is None:
        return None
    state = TraceState.from_header([trace.tracestate]) if trace.tracestate else None
    remote = SpanContext(
        trace.trace_id,
        trace.parent_span_id,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if trace.parent_sampled else 0),
        trace_state=state,
    )
    return set_span_in_context(NonRecordingSpan(remote))


class _ChosenIds(IdGenerator):
    """Random ids, except the next span's when they were chosen in advance
    (:meth:`OtelExporter.begin`): the tracer asks for them as it starts the span."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._trace: int | None = None
        self._span: int | None = None

    def choose(self, trace_id: int | None, span_id: int | None) -> None:
        self._trace, self._span = trace_id, span_id

    def generate_span_id(self) -> int:
        return self._span if self._span is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self._trace if self._trace is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return True  # chosen by traceparent.begin_trace from 128 random bits, or the client's


class _Unsent(SpanExporter):
    """``OTEL_TRACES_EXPORTER=none``: spans are made (the metrics need nothing of them) and
    let go."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS
