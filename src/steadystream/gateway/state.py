"""What every request handler shares: configuration, upstreams, clock, metrics, recorder."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.types import Scope

from steadystream._clock import Clock
from steadystream.gateway.auth import Authenticator
from steadystream.gateway.config import GatewayConfig
from steadystream.gateway.export import GatewayMetrics, StreamLabels
from steadystream.gateway.recording import StreamRecord, TimelineSink
from steadystream.gateway.upstreams import UpstreamPool

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
    transport_of: Callable[[Scope], asyncio.WriteTransport | None] | None = None
    """The client connection of a request, when the server that runs the app can tell
    (``GatewayServer`` and ``serve`` can): the relay sends without a hop through its buffer
    while the connection's write buffer is empty, and drops a stuck client's connection."""

    def finish_record(self, record: StreamRecord, end_ns: int) -> None:
        """Build a finished request's timelines, observe them, and record them."""
        up, down = record.timelines(end_ns, keep_text=self.config.recording.keep_text)
        labels = labels_of(record)
        duration = (end_ns - record.received_ns) / 1e9
        self.metrics.observe_stream(labels, (up, down), duration_s=duration)
        self.metrics.streams.labels(*labels, record.outcome.value).inc()
        if self.recorder is not None:
            try:
                self.recorder.write((up, down))
            except OSError as exc:  # a full disk must not take the stream down with it
                self.log.error("recording failed: %s", exc)


def labels_of(record: StreamRecord) -> StreamLabels:
    labels = record.labels
    return (
        labels.get("model", ""),
        labels.get("route", ""),
        labels.get("tenant", ""),
        labels.get("upstream", "none"),
    )
