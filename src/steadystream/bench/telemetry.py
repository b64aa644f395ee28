"""``bench``'s side of OpenTelemetry (docs/monitoring.md#opentelemetry): each recorded stream,
once it has ended, as a client span and the GenAI client metrics.

On when ``--otel-endpoint`` is given or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``); the SDK is imported only then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING

from steadystream.bench.endpoint import Endpoint
from steadystream.otel import Call, client_stream, open_exporter, resolve_settings
from steadystream.otel.streams import server_of
from steadystream.otel.worker import ExportWorker
from steadystream.timeline import Timeline

if TYPE_CHECKING:
    from steadystream.otel.sdk import OtelExporter

__all__ = ["BenchTelemetry", "bench_telemetry", "exporting"]


class BenchTelemetry:
    """Spans and metrics of a bench's streams, through ``exporter``."""

    def __init__(self, exporter: OtelExporter, endpoint: Endpoint) -> None:
        self.exporter = exporter
        self._worker = ExportWorker(exporter, exporter.settings.max_queue_spans)
        address, port = server_of(endpoint.base_url)
        self._call = Call(
            operation="text_completion" if endpoint.kind == "completions" else "chat",
            provider="anthropic" if endpoint.kind == "messages" else "openai",
            streaming=True,
            request_model=endpoint.model,
            response_model=endpoint.model,
            server_address=address,
            server_port=port,
        )

    def stream_ended(self, timeline: Timeline) -> None:
        """Hand one finished stream over (made into telemetry on the exporter's thread)."""
        self._worker.submit(lambda: (*client_stream(timeline, self._call), None))

    def beside(self, sink: Callable[[Timeline], None]) -> Callable[[Timeline], None]:
        """``sink`` (the output file), each stream then handed on here too."""

        def both(timeline: Timeline) -> None:
            sink(timeline)
            self.stream_ended(timeline)

        return both

    def close(self) -> None:
        """Finish the streams handed over (blocks); the exporter stays open."""
        self._worker.close()

    def shutdown(self) -> None:
        """Export what is left and close the exporter (blocks: call it off the loop)."""
        self.close()
        self.exporter.shutdown()


@contextlib.asynccontextmanager
async def exporting(telemetry: BenchTelemetry | None) -> AsyncIterator[None]:
    """Shut ``telemetry`` down at the end, on a thread: the last spans and metrics go out,
    within ``shutdown_timeout_ms`` (5 s) whatever the collector does, and what did not is
    said in one log line."""
    try:
        yield
    finally:
        if telemetry is not None:
            await asyncio.to_thread(telemetry.shutdown)


def bench_telemetry(
    endpoint: Endpoint, env: Mapping[str, str], otel_endpoint: str | None = None
) -> BenchTelemetry | None:
    """The bench's telemetry, or None when it is off."""
    settings = resolve_settings(env, endpoint=otel_endpoint, default_service="steadystream-bench")
    if settings is None:
        return None
    return BenchTelemetry(open_exporter(settings), endpoint)
