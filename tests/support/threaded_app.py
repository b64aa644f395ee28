"""An aiohttp app served on 127.0.0.1 from a background thread: the scripted upstreams'
shared part. A subclass adds its routes (:meth:`ThreadedApp.routes`); ``with`` starts the
server (its port is known on entry) and stops it."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web

__all__ = ["ThreadedApp"]


class ThreadedApp:
    """Serves :meth:`routes` on an ephemeral loopback port while the ``with`` block runs."""

    what = "the server"  # how an error names it

    def __init__(self) -> None:
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        self.routes(app)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.what} did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
