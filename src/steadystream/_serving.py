"""Serving an ASGI app with uvicorn, in the foreground or in a background thread.

The lab and the gateway both run this way: in the foreground from the CLI, and in a thread
of their own (own event loop, free loopback port) for tests, the demo and benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp

from steadystream._exceptions import SteadystreamError

__all__ = [
    "BackgroundServer",
    "ServedApp",
    "listening_socket",
    "new_event_loop",
    "uvicorn_config",
]

_T = TypeVar("_T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (the ``fast`` extra), as uvicorn itself would pick."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def uvicorn_config(app: ASGIApp, host: str, port: int, log_level: str) -> uvicorn.Config:
    # No access log: a line per request costs more than relaying its events. Open streams
    # get two seconds to finish on shutdown.
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )


def listening_socket(host: str, port: int, *, send_buffer: int | None = None) -> socket.socket:
    """A bound socket for uvicorn; ``port=0`` picks a free one.

    Accepted connections inherit the send buffer size: a fixed buffer (instead of the
    kernel's autotuning, up to megabytes) bounds what a client that stops reading can hold in
    the kernel, so backpressure reaches the server early.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if send_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class BackgroundServer:
    """An ASGI app served by uvicorn in its own thread and event loop.

    ``server`` exists from construction, so callers can hand the app hooks into uvicorn's
    state before :meth:`start`.
    """

    def __init__(
        self, app: ASGIApp, sock: socket.socket, *, name: str, log_level: str = "warning"
    ) -> None:
        self.name = name
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        host = sock.getsockname()[0]
        self.server = uvicorn.Server(uvicorn_config(app, host, self.port, log_level))
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
            finally:
                ready.set()
                try:
                    _wind_down(loop)
                finally:
                    loop.close()

        self._thread = threading.Thread(target=run, name=f"{self.name}-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        if failure or not self.server.started:
            self.stop()
            reason = failure[0] if failure else "it did not report ready in 30 s"
            raise SteadystreamError(f"{self.name} did not start: {reason}")

    async def _serve(self, ready: threading.Event) -> None:
        task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
        while not self.server.started and not task.done():
            await asyncio.sleep(0.01)
        ready.set()
        await task

    def run_in_loop(self, coroutine: Coroutine[Any, Any, _T], *, timeout_s: float = 10) -> _T:
        """Run a coroutine on the server's loop and wait for its result."""
        if self.loop is None or not self.running:
            coroutine.close()
            raise SteadystreamError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=timeout_s)

    def call_in_loop(self, fn: Callable[[], _T]) -> _T:
        """Call ``fn`` on the server's loop (where its state lives); directly when stopped."""
        if not self.running:
            return fn()

        async def call() -> _T:
            return fn()

        return self.run_in_loop(call())

    def stop(self) -> None:
        """Stop serving (open streams get the graceful-shutdown time) and join the thread."""
        thread = self._thread
        if thread is None:
            return
        self.server.should_exit = True
        thread.join(timeout=30)
        if thread.is_alive():  # a hung shutdown: force it
            self.server.force_exit = True
            with contextlib.suppress(RuntimeError):
                thread.join(timeout=5)
        self._thread = None
        self.loop = None


# How long what the app left running gets to finish once cancelled, at the server's stop.
_WIND_DOWN_S = 5.0


def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still running on ``loop`` once uvicorn has returned, and let it end
    on the live loop, as ``asyncio.run`` does.

    uvicorn cancels the requests that outlive its graceful shutdown and returns without
    waiting for them; a task left pending is collected later, its ``finally`` (which closes
    its connections) never run on a loop, its sockets unclosed. Its transports must also be
    let go before the loop closes: uvloop refuses to close with a handle open (EBUSY).
    """
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=_WIND_DOWN_S))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(asyncio.sleep(0))  # (the transports closed above, let go)


_Self = TypeVar("_Self", bound="ServedApp")


class ServedApp:
    """An app of ours on a loopback port (free by default), in a background thread.

    The shell the lab's and the gateway's test servers share: ``url``/``base_url``,
    ``start``/``stop`` and the context manager. Subclasses hook uvicorn's state into their
    app before it serves (:meth:`_attach`) and wind down before it stops (:meth:`_detach`).
    """

    name = "the server"

    def __init__(
        self,
        app: Starlette,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        send_buffer: int | None = None,
    ) -> None:
        self.app = app
        self._host = host
        self._port = port
        self._log_level = log_level
        self._send_buffer = send_buffer
        self._background: BackgroundServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``"""
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    def start(self: _Self) -> _Self:
        sock = listening_socket(self._host, self._port, send_buffer=self._send_buffer)
        background = BackgroundServer(self.app, sock, name=self.name, log_level=self._log_level)
        self.port = background.port
        self._attach(background.server)
        self._background = background
        background.start()
        return self

    def stop(self) -> None:
        """Stop serving (open streams get the graceful-shutdown time) and join the thread."""
        background, self._background = self._background, None
        if background is None:
            return
        if background.running:
            self._detach(background)
        background.stop()

    def call_in_loop(self, fn: Callable[[], _T]) -> _T:
        """Call ``fn`` on the server's event loop, where its state lives."""
        if self._background is None:
            return fn()
        return self._background.call_in_loop(fn)

    def _attach(self, server: uvicorn.Server) -> None:
        """Give the app what it needs from uvicorn (before it serves)."""

    def _detach(self, background: BackgroundServer) -> None:
        """Wind down while the loop still runs (before the server stops)."""

    def __enter__(self: _Self) -> _Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
