"""The OTLP exporters :mod:`.sdk` sends through: bounded, counted, quiet and kept from the
environment's headers.

- **Bounded.** Each export gives up after ``export_timeout_ms``, its retries included (the
  SDK's default is 10 s and its metric reader's 30 s, which made a shutdown with the collector
  away take half a minute). After :meth:`Counted.cut_off` an export fails at once, so the
  SDK's last exports at shutdown cost nothing once :mod:`.sdk` has stopped waiting for them.
- **Counted.** Each export's outcome is counted (:class:`Counted`): spans and metric batches
  that did not reach the collector are a number, said once (:mod:`.sdk`), not a log line each.
- **Quiet.** While one of these exporters runs (on whichever thread) the SDK's own loggers
  are held back (:class:`_Quiet`): their retry lines flooded stderr, and a header the HTTP
  library refused was logged with its value. Other OpenTelemetry users in the process (an app
  that embeds the gateway) keep their logs: only records made inside our calls are held.
- **Headers from us only.** The SDK's exporters read ``OTEL_EXPORTER_OTLP_HEADERS`` (and its
  per-signal variants) from ``os.environ`` themselves, and log an entry they cannot parse with
  its value. They are built with the headers :mod:`.settings` checked, while those variables
  are hidden from them (:func:`_headers_hidden`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from steadystream.otel.settings import OtelSettings

__all__ = ["Counted", "CountedMetrics", "CountedSpans", "otlp_metrics", "otlp_spans"]

# Read by the SDK's OTLP exporters as they are built; we pass the checked headers instead.
_HEADER_VARIABLES = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
)
_environment = threading.Lock()


class Counted:
    """What one exporter settled: items sent or lost, SDK log records held back; and a
    ``first_failure`` callback, called once, at the first export that failed."""

    def __init__(self, first_failure: Callable[[], None] = lambda: None) -> None:
        self.settled = 0
        self.failed = 0
        self.held_back = 0  # the SDK's log records made inside our calls
        self.cut = False
        self._first_failure: Callable[[], None] | None = first_failure

    def cut_off(self) -> None:
        """From now on an export fails at once (counted): nothing more is waited for."""
        self.cut = True

    def outcome(self, items: int, sent: bool) -> None:
        self.settled += items
        if not sent:
            self.failed += items
            if self._first_failure is not None:
                say, self._first_failure = self._first_failure, None
                say()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """The SDK's loggers held back (and counted here) on this thread, inside the block."""
        _QUIET.install()
        before, _QUIET.local.counted = getattr(_QUIET.local, "counted", None), self
        try:
            yield
        finally:
            _QUIET.local.counted = before


class CountedSpans(SpanExporter):
    """The OTLP span exporter, counted, quiet, and cut off when told."""

    def __init__(self, inner: SpanExporter, counted: Counted) -> None:
        self.inner = inner
        self.counted = counted
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.FAILURE
        if not self.counted.cut:
            with self.counted.quiet():
                try:
                    result = self.inner.export(spans)
                except Exception:  # an exporter that raises loses its batch as one that fails
                    result = SpanExportResult.FAILURE
        self.counted.outcome(len(spans), result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        if not self._shut:
            self._shut = True
            with self.counted.quiet():
                self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self.counted.quiet():
            return self.inner.force_flush(timeout_millis)


class CountedMetrics(MetricExporter):
    """The OTLP metric exporter, counted (in exports, not points), quiet, cut off when told."""

    def __init__(self, inner: MetricExporter, counted: Counted) -> None:
        # The reader asks its exporter for these; the inner one chose them (from OTEL_*).
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self.counted = counted
        self._shut = False

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        result = MetricExportResult.FAILURE
        if not self.counted.cut:
            with self.counted.quiet():
                try:
                    result = self.inner.export(metrics_data, timeout_millis=timeout_millis)
                except Exception:
                    result = MetricExportResult.FAILURE
        self.counted.outcome(1, result is MetricExportResult.SUCCESS)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        with self.counted.quiet():
            return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if not self._shut:
            self._shut = True
            with self.counted.quiet():
                self.inner.shutdown(timeout_millis=timeout_millis)


def otlp_spans(settings: OtelSettings, counted: Counted) -> SpanExporter:
    """The SDK's OTLP span exporter for ``settings`` (HTTP/protobuf or gRPC)."""
    exporter: Any
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        exporter = HttpSpanExporter
    return _built(exporter, settings, "traces", counted)  # type: ignore[no-any-return]


def otlp_metrics(settings: OtelSettings, counted: Counted) -> MetricExporter:
    """The SDK's OTLP metric exporter for ``settings`` (HTTP/protobuf or gRPC)."""
    exporter: Any
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetricExporter,
        )

        exporter = HttpMetricExporter
    return _built(exporter, settings, "metrics", counted)  # type: ignore[no-any-return]


def _built(
    exporter: Any, settings: OtelSettings, signal: Literal["traces", "metrics"], counted: Counted
) -> Any:
    """``exporter`` made for ``signal``: the checked headers given (gRPC's lower-cased), the
    short timeout, quiet, and with the header variables hidden while it reads them."""
    headers = dict(settings.signal_headers_for(signal))
    if settings.protocol == "grpc":
        headers = _grpc_headers(headers)
    with counted.quiet(), _headers_hidden():
        return exporter(
            endpoint=settings.signal_endpoint(signal),
            headers=headers,
            timeout=settings.export_timeout_ms / 1000,
        )


def _grpc_headers(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}  # gRPC metadata keys


@contextlib.contextmanager
def _headers_hidden() -> Iterator[None]:
    """The header variables out of ``os.environ`` while an exporter is built: it takes the
    headers it is given and cannot log an entry it fails to parse. (Briefly: the SDK reads
    nothing else under these names, and they are put back at once.)"""
    with _environment:
        hidden = {name: os.environ.pop(name) for name in _HEADER_VARIABLES if name in os.environ}
        try:
            yield
        finally:
            os.environ.update(hidden)


class _Quiet(logging.Filter):
    """Holds back the SDK's log records made on a thread inside :meth:`Counted.quiet`."""

    def __init__(self) -> None:
        super().__init__("steadystream.otel.quiet")
        self.local = threading.local()
        self._installed: set[str] = set()
        self._seen = 0  # loggers there were at the last install
        self._lock = threading.Lock()

    def install(self) -> None:
        """On every OpenTelemetry logger there is (a logger's filters see only its own
        records, so each one needs it); loggers made since are added on the next call."""
        loggers = logging.Logger.manager.loggerDict
        if len(loggers) == self._seen:
            return
        with self._lock:
            self._seen = len(loggers)
            for name, logger in list(loggers.items()):
                if (
                    name.startswith("opentelemetry")
                    and name not in self._installed
                    and isinstance(logger, logging.Logger)
                ):
                    logger.addFilter(self)
                    self._installed.add(name)

    def filter(self, record: logging.LogRecord) -> bool:
        counted: Counted | None = getattr(self.local, "counted", None)
        if counted is None:
            return True
        counted.held_back += 1
        return False


_QUIET = _Quiet()
