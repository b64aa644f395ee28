"""The gateway's side of OpenTelemetry (docs/monitoring.md#opentelemetry): what it tells
:mod:`steadystream.otel` about a request, at its start and at its end.

At the start (:meth:`GatewayTelemetry.begin`) the client's ``traceparent`` is read and the
gateway span's ids chosen, so the upstream request carries them; at the end
(:meth:`GatewayTelemetry.stream_ended`, from ``GatewayState.finish_record``) the stream's two
edges become its span and metric observations. Nothing here runs per event.

Only built when telemetry is on (an OTLP endpoint in ``otel`` or ``OTEL_*``); the SDK is
imported then, in the worker that serves (``lifespan``), never by ``check_startable``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from steadystream._exceptions import ConfigError
from steadystream.gateway.config import GatewayConfig, UpstreamConfig
from steadystream.otel import Call, OtelSettings, TraceContext, gateway_stream, resolve_settings
from steadystream.otel.streams import server_of
from steadystream.otel.worker import ExportWorker, Made
from steadystream.timeline import Timeline

if TYPE_CHECKING:
    from steadystream.otel.sdk import OtelExporter

__all__ = ["GatewayTelemetry", "Traced", "telemetry_settings"]

_OPERATIONS = {"chat": "chat", "responses": "chat", "messages": "chat"}


@dataclass(frozen=True, slots=True)
class Traced:
    """A request's trace context, kept on its record until it ends."""

    context: TraceContext
    streaming: bool


def telemetry_settings(config: GatewayConfig, env: Mapping[str, str]) -> OtelSettings | None:
    """The export settings (None: off); a :class:`ConfigError` for a bad ``otel`` section
    or ``OTEL_*`` variable, or for telemetry on without the ``otel`` extra installed."""
    otel = config.otel
    try:
        settings = resolve_settings(
            env,
            enabled=otel.enabled,
            endpoint=otel.endpoint,
            protocol=otel.protocol,
            service_name=otel.service_name,
            resource=otel.resource_attributes,
            default_service="steadystream-gateway",
            max_queue_spans=otel.max_queue_spans,
            metrics_interval_ms=max(1, otel.metrics_interval // 1_000_000),
        )
    except ConfigError as exc:
        raise ConfigError(f"otel: {exc}") from None
    if settings is not None and importlib.util.find_spec("opentelemetry.sdk") is None:
        raise ConfigError(
            "otel: export is on but the OpenTelemetry SDK is not installed:"
            " pip install 'steadystream[otel]'"
        )
    return settings


class GatewayTelemetry:
    """Spans and metrics of the gateway's streams, through ``exporter``."""

    def __init__(self, exporter: OtelExporter, config: GatewayConfig) -> None:
        self.exporter = exporter
        self._upstreams = {u.name: u for u in config.upstreams}
        self._worker = ExportWorker(exporter, exporter.settings.max_queue_spans)

    def begin(self, headers: Mapping[str, str], streaming: bool) -> Traced:
        """A request arrived with ``headers``: its span's ids (continuing the client's
        ``traceparent``); ``Traced.context.headers()`` go upstream."""
        traceparent = headers.get("traceparent")
        getlist = getattr(headers, "getlist", None)  # Starlette's: every header of the name
        if getlist is not None and len(getlist("traceparent")) > 1:
            traceparent = None  # W3C: two traceparent headers are none (a new trace starts)
        context = self.exporter.begin(traceparent, headers.get("tracestate"))
        return Traced(context, streaming)

    def stream_ended(
        self, upstream: Timeline, downstream: Timeline, traced: Traced, model_label: str
    ) -> None:
        """Hand one finished request to the exporter (its span and observations are made on
        the exporter's thread: otel/worker.py)."""
        self._worker.submit(lambda: self._made(upstream, downstream, traced, model_label))

    def _made(
        self, upstream: Timeline, downstream: Timeline, traced: Traced, model_label: str
    ) -> Made:
        labels = downstream.labels
        route = labels.get("route", "chat")
        model = labels.get("model", "")
        served_by = self._upstreams.get(labels.get("upstream", ""))
        address, port = _server(served_by)
        call = Call(
            operation=_OPERATIONS.get(route, "text_completion"),
            provider=_provider(route, served_by),
            streaming=traced.streaming,
            request_model=model,
            response_model=served_by.upstream_model(model) if served_by is not None else None,
            metric_model=model_label,
            server_address=address,
            server_port=port,
        )
        span, measures = gateway_stream(upstream, downstream, call)
        return span, measures, traced.context

    def close(self) -> None:
        """Finish the streams handed over (blocks: call it off the loop); the exporter
        stays open."""
        self._worker.close()

    def shutdown(self) -> None:
        """Export what is left and close the exporter (blocks: call it off the loop)."""
        self.close()
        self.exporter.shutdown()


def _server(upstream: UpstreamConfig | None) -> tuple[str | None, int | None]:
    """The upstream's host and port (``server.address``, ``server.port``)."""
    if upstream is None:
        return None, None
    return server_of(upstream.base_url)


def _provider(route: str, upstream: UpstreamConfig | None) -> str:
    """``gen_ai.provider.name``: the API the upstream was spoken to in (Anthropic's Messages,
    else OpenAI's), which is what the gateway knows of who serves it."""
    speaks = None if upstream is None else upstream.dialects
    if route == "messages" and (speaks is None or "messages" in speaks):
        return "anthropic"
    return "openai"
