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

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.types import Scope

from steadystream._exceptions import SteadystreamError
from steadystream.gateway.app import create_app
from steadystream.gateway.config import GatewayConfig
from steadystream.gateway.recording import TimelineSink
from steadystream.gateway.state import GatewayState

__all__ = ["GatewayServer", "listen", "serve"]


def _uvicorn_config(app: Starlette, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )


def _transport_of(server: uvicorn.Server) -> Callable[[Scope], asyncio.WriteTransport | None]:
    """Finds a request's connection among uvicorn's (by the client's address and port)."""

    def find(scope: Scope) -> asyncio.WriteTransport | None:
        client = scope.get("client")
        if client is None:
            return None
        for connection in list(server.server_state.connections):
            if getattr(connection, "client", None) == tuple(client):
                transport = getattr(connection, "transport", None)
                # uvloop's transports do not derive from asyncio's: check what is used.
                usable = hasattr(transport, "get_write_buffer_size") and hasattr(transport, "abort")
                return transport if usable else None
        return None

    return find


def listen(host: str, port: int, send_buffer: int | None) -> socket.socket:
    """The listening socket. Accepted connections inherit its send buffer size: a fixed
    buffer (instead of the kernel's autotuning, up to megabytes) bounds what a client that
    stops reading can hold in the kernel, so backpressure reaches the relay early.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind((host, port))
    return sock


def serve(config: GatewayConfig, *, log_level: str = "info") -> None:
    """Serve the gateway on the configured host and port until interrupted (Ctrl-C)."""
    app = create_app(config)
    host, port = config.server.host, config.server.port
    sock = listen(host, port, config.limits.client_send_buffer)
    server = uvicorn.Server(_uvicorn_config(app, host, sock.getsockname()[1], log_level))
    app.state.gateway.transport_of = _transport_of(server)
    server.run(sockets=[sock])


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class GatewayServer:
    """The gateway on a loopback port (free by default), in a background thread."""

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
        self.app = create_app(config, registry=registry, recorder=recorder, env=env)
        self._send_buffer = config.limits.client_send_buffer
        self._host = host
        self._port = port
        self._log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def state(self) -> GatewayState:
        state: GatewayState = self.app.state.gateway
        return state

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``"""
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    def start(self) -> GatewayServer:
        sock = listen(self._host, self._port, self._send_buffer)
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(_uvicorn_config(self.app, self._host, self.port, self._log_level))
        self.state.transport_of = _transport_of(server)
        self._server = server
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = _new_loop()
            try:
                loop.run_until_complete(self._serve(server, sock, ready))
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
            finally:
                ready.set()
                loop.close()

        self._thread = threading.Thread(target=run, name=f"gateway-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        if failure or not server.started:
            self.stop()
            reason = failure[0] if failure else "it did not report ready"
            raise SteadystreamError(f"the gateway did not start: {reason}")
        return self

    @staticmethod
    async def _serve(server: uvicorn.Server, sock: socket.socket, ready: threading.Event) -> None:
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        ready.set()
        await task

    def stop(self) -> None:
        """Stop the server (open streams get the graceful-shutdown time) and join its thread."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(timeout=30)
        if thread.is_alive():  # pragma: no cover - a hung shutdown: force it
            server.force_exit = True
            with contextlib.suppress(RuntimeError):
                thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> GatewayServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
