"""Running the gateway: in the foreground with uvicorn, or in a background thread for tests.

:class:`GatewayServer` starts the gateway on a free 127.0.0.1 port in its own thread and
event loop and stops it on exit, so tests, the demo and the benchmark get a real gateway in
one line::

    with LabServer() as lab, GatewayServer(config_from_upstreams([lab.base_url])) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused")

Event streams are never compressed (no compression middleware is installed) and uvicorn's
access log is off: a line per request would cost more than relaying its events.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import NoReturn

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.types import ASGIApp

from steadystream._exceptions import ConfigError
from steadystream._gc import quiet_gc
from steadystream._serving import ServedApp, listening_socket, uvicorn_config
from steadystream._signals import handling
from steadystream._uvicorn import client_link, http_protocol, shutting_down
from steadystream.gateway.app import check_startable, create_app
from steadystream.gateway.config import GatewayConfig
from steadystream.gateway.recording import TimelineSink
from steadystream.gateway.state import GatewayState

__all__ = ["GatewayServer", "serve", "serve_on"]


def serve(
    config: GatewayConfig,
    *,
    log_level: str = "info",
    reload: Callable[[], GatewayConfig] | None = None,
) -> None:
    """Serve the gateway on the configured host and port until interrupted (Ctrl-C, SIGTERM).

    With ``server.workers`` above one, that many processes share the port
    (:mod:`steadystream.gateway.workers`); SIGHUP then replaces them one at a time, with the
    configuration ``reload`` returns. A configuration the gateway cannot start with (a key's
    variable not set) and an address it cannot listen on are :class:`ConfigError` here.
    """
    if config.server.worker_count > 1:
        from steadystream.gateway.workers import serve_workers

        check_startable(config)  # a missing key, say: refused here, before any fork
        serve_workers(config, _listen(config), serve_on, log_level=log_level, reload=reload)
        return
    app = check_startable(config)
    with _hangup_ignored(), handling(signal.SIGTERM, _stop_cleanly):
        serve_on(app, config, _listen(config), log_level)


def _stop_cleanly(signum: int, frame: FrameType | None) -> NoReturn:
    """SIGTERM outside uvicorn's own handling: before it starts serving, or given back by
    it (uvicorn raises the signal it caught again once it has shut down gracefully). The
    stop was asked for and done: exit 0, as the parent of several workers does, not 143."""
    raise SystemExit(0)


_BACKLOG = 2048  # uvicorn's, which it sets again when it serves


def _listen(config: GatewayConfig) -> socket.socket:
    """The gateway's socket, listening already: a bound socket that is not yet listening
    holds no port against another one bound with ``SO_REUSEADDR`` (a second gateway started
    while the first one's workers start), and the first to listen would take the port from
    the other's workers, which would then wait on a socket that never gets a connection."""
    host, port = config.server.host, config.server.port
    sock: socket.socket | None = None
    try:
        sock = listening_socket(host, port, send_buffer=config.limits.client_send_buffer)
        sock.listen(_BACKLOG)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise ConfigError(
            f"server.host and server.port: cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    return sock


_HANGUP_IGNORED = (
    b"gateway: SIGHUP ignored: a reload replaces worker processes, and this gateway serves "
    b"in one process (with server.workers: 2 or more, SIGHUP reloads without a restart)\n"
)


def _hangup_ignored() -> contextlib.AbstractContextManager[None]:
    """One in-process worker has nothing to reload into: SIGHUP says so instead of ending
    the process (and every stream in it), which is what it does by default."""

    def say(signum: int, frame: FrameType | None) -> None:
        # os.write: a print here could land inside another print to stderr (reentrant)
        os.write(sys.stderr.fileno(), _HANGUP_IGNORED)

    return handling(signal.SIGHUP, say)


def serve_on(
    app: Starlette,
    config: GatewayConfig,
    sock: socket.socket,
    log_level: str,
    *,
    outer: ASGIApp | None = None,
) -> None:
    """Run ``app`` (a gateway made from ``config``) on a bound socket until it is stopped;
    ``outer``, an app wrapped around it, is what uvicorn serves when given."""
    served = outer if outer is not None else app
    uv_config = uvicorn_config(served, config.server.host, sock.getsockname()[1], log_level)
    uv_config.http = http_protocol(config.server.header_timeout / 1e9)
    server = uvicorn.Server(uv_config)
    app.state.gateway.client_link = client_link(server)
    app.state.gateway.shutting_down = shutting_down(server)
    quiet_gc()  # the process is this server's (GatewayServer, a thread, leaves it be)
    server.run(sockets=[sock])


class GatewayServer(ServedApp):
    """The gateway on a loopback port (free by default), in a background thread."""

    name = "the gateway"

    def __init__(
        self,
        config: GatewayConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        registry: CollectorRegistry | None = None,
        recorder: TimelineSink | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str = "warning",
    ) -> None:
        super().__init__(
            create_app(config, registry=registry, recorder=recorder, env=env),
            host=host,
            port=port,
            log_level=log_level,
            send_buffer=config.limits.client_send_buffer,
        )

    @property
    def state(self) -> GatewayState:
        state: GatewayState = self.app.state.gateway
        return state

    def _attach(self, server: uvicorn.Server) -> None:
        self.state.client_link = client_link(server)
        self.state.shutting_down = shutting_down(server)
        server.config.http = http_protocol(self.state.config.server.header_timeout / 1e9)
