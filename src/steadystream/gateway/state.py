"""What every request handler shares: configuration, upstreams, clock, metrics, recorder."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Scope, Send

from steadystream._clock import Clock
from steadystream._uvicorn import ClientLink
from steadystream.gateway.auth import Authenticator
from steadystream.gateway.config import GatewayConfig
from steadystream.gateway.export import GatewayMetrics, StreamLabels
from steadystream.gateway.model_labels import ModelLabels
from steadystream.gateway.recording import StreamRecord, TimelineSink
from steadystream.gateway.resume.hub import StreamHub
from steadystream.gateway.telemetry import GatewayTelemetry
from steadystream.gateway.upstreams import UpstreamPool
from steadystream.glass.tokens import GlassTokens

__all__ = ["GatewayState", "labels_of"]

log = logging.getLogger("steadystream.gateway")


@dataclass(eq=False)
class GatewayState:
    config: GatewayConfig
    auth: Authenticator
    pool: UpstreamPool
    clock: Clock
    metrics: GatewayMetrics
    recorder: TimelineSink | None = None
    log: logging.Logger = field(default=log)
    model_labels: ModelLabels = field(default_factory=lambda: ModelLabels([], 100))
    client_link: Callable[[Scope, Send], ClientLink] | None = None
    """A request's client connection, when the server that runs the app can tell
    (``GatewayServer`` and ``serve`` can, through steadystream/_uvicorn.py): the line writes
    to it without a hop through the buffer while its write buffer is empty, in chunks where
    uvicorn frames the response so, and the relay drops a stuck client's connection."""
    shutting_down: Callable[[], bool] = field(default=lambda: False)
    """Whether the server that runs the app is shutting down (steadystream/_uvicorn.py; never,
    where the server cannot tell): a stream it cancels then is ended in-band, with a reason,
    not cut short."""
    requests: set[asyncio.Task[Any]] = field(default_factory=set)
    """The streams being served (generations, resumed readers): the app's shutdown waits for
    those the server cancelled to end in-band before it closes what they record to."""
    glass_tokens: GlassTokens | None = None
    """With ``glass.accept``: the token each answer carries for its page's glass report."""
    telemetry: GatewayTelemetry | None = None
    """With OpenTelemetry on (``otel``, ``OTEL_*``): a span and GenAI metrics per stream."""
    resume: StreamHub | None = None
    """With ``resume.enabled``: the streams that outlive their reader (gateway/resume)."""

    def finish_record(self, record: StreamRecord, end_ns: int) -> None:
        """Build a finished request's timelines, observe them, and record them."""
        up, down = record.timelines(
            end_ns, keep_text=self.config.recording.keep_text, redact=self.pool.hide_keys
        )
        labels = labels_of(record, self.model_labels)
        duration = (end_ns - record.received_ns) / 1e9
        self.metrics.observe_stream(labels, (up, down), duration_s=duration)
        self.metrics.streams.labels(*labels, record.outcome.value).inc()
        if self.recorder is not None:
            try:
                self.recorder.write((up, down))
            except OSError as exc:  # a full disk must not take the stream down with it
                self.log.error("recording failed: %s", exc)
        if self.telemetry is not None and record.trace is not None:
            self.telemetry.stream_ended(up, down, record.trace, labels[0])


def labels_of(record: StreamRecord, models: ModelLabels) -> StreamLabels:
    """A request's metric labels, its model folded into a bounded set."""
    labels = record.labels
    return (
        models.label(labels.get("model", "")),
        labels.get("route", ""),
        labels.get("tenant", ""),
        labels.get("upstream", "none"),
    )
