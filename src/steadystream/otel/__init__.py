"""OpenTelemetry out: a span per stream and the GenAI metrics, over OTLP (docs/monitoring.md).

A leaf: the gateway and ``bench`` call it only when telemetry is on, and nothing imports
OpenTelemetry until :func:`open_exporter` does (the ``otel`` extra)::

    settings = resolve_settings(os.environ)            # None: off (no OTLP endpoint set)
    exporter = open_exporter(settings)                 # the SDK, OTLP exporters, providers
    trace = exporter.begin(headers.get("traceparent")) # as the request arrives
    ...                                                # upstream gets trace.headers()
    exporter.export_stream(*gateway_stream(up, down, call), trace)   # as it ends

Parts: :mod:`.settings` (the ``OTEL_*`` environment), :mod:`.traceparent` (W3C Trace
Context), :mod:`.streams` (a stream as a span and observations, pure), :mod:`.conventions`
(names and bounds), :mod:`.sdk` (the SDK edge), :mod:`.exporters` (its OTLP exporters:
bounded, counted, quiet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from steadystream._exceptions import ConfigError
from steadystream.otel.settings import OtelSettings, resolve_settings
from steadystream.otel.streams import Call, client_stream, gateway_stream
from steadystream.otel.traceparent import TraceContext, begin_trace

if TYPE_CHECKING:
    from steadystream.otel.sdk import OtelExporter

__all__ = [
    "Call",
    "OtelSettings",
    "TraceContext",
    "begin_trace",
    "client_stream",
    "gateway_stream",
    "open_exporter",
    "resolve_settings",
]


def open_exporter(settings: OtelSettings, **kwargs: Any) -> OtelExporter:
    """The SDK's providers and exporters for ``settings`` (``kwargs``: see
    :class:`~steadystream.otel.sdk.OtelExporter`); a :class:`ConfigError` that says what to
    install when the ``otel`` extra is not."""
    try:
        from steadystream.otel.sdk import OtelExporter
    except ImportError as exc:
        raise ConfigError(
            "OpenTelemetry export is on (OTEL_EXPORTER_OTLP_ENDPOINT or otel.endpoint) but the"
            " SDK is not installed: pip install 'steadystream[otel]'"
            f" ({exc.name or exc})"
        ) from exc
    return OtelExporter(settings, **kwargs)
