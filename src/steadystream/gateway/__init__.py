"""The gateway: an OpenAI-compatible streaming proxy that measures, paces, fails over and cancels.

Put it between clients and providers by changing the clients' base URL. For each stream it
records timelines at both edges, exports Prometheus metrics, paces delivery if asked, guards
the stream with a stall watchdog and failover (before and after the first token), closes the
upstream the moment the client leaves, and bounds what a slow client can cost
(docs/gateway.md).

    >>> config = load_config("gateway.yaml")              # or config_from_upstreams([url])
    >>> app = create_app(config)                          # an ASGI app (Starlette)
    >>> with GatewayServer(config) as gateway:            # a real server on a free port
    ...     gateway.base_url                              # http://127.0.0.1:PORT/v1
"""

from steadystream.gateway.app import PACER_HEADER, create_app
from steadystream.gateway.auth import Tenant
from steadystream.gateway.config import (
    FailoverConfig,
    GatewayConfig,
    LimitsConfig,
    PacingConfig,
    RecordingConfig,
    ServerConfig,
    TenantConfig,
    UpstreamConfig,
    UpstreamTimeouts,
    WatchdogConfig,
    config_from_mapping,
    config_from_upstreams,
    load_config,
)
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.recording import TimelineRecorder, TimelineSink
from steadystream.gateway.server import GatewayServer, serve

__all__ = [
    "PACER_HEADER",
    "FailoverConfig",
    "GatewayConfig",
    "GatewayMetrics",
    "GatewayServer",
    "LimitsConfig",
    "PacingConfig",
    "RecordingConfig",
    "ServerConfig",
    "Tenant",
    "TenantConfig",
    "TimelineRecorder",
    "TimelineSink",
    "UpstreamConfig",
    "UpstreamTimeouts",
    "WatchdogConfig",
    "config_from_mapping",
    "config_from_upstreams",
    "create_app",
    "load_config",
    "serve",
]
