"""Running the lab: in the foreground with uvicorn, or in a background thread for tests.

:class:`LabServer` starts the lab on a free 127.0.0.1 port in its own thread and event loop
and stops it on exit, so tests, the demo and benchmarks get a real server in one line::

    with LabServer("kv-pressure", seed=1) as lab:
        client = openai.OpenAI(base_url=lab.base_url, api_key="lab")

Both ways give the app a connection resetter that looks up the request's connection in
uvicorn's server state and aborts it with SO_LINGER 0, so ``reset-after`` faults send a real
TCP RST (clients see a transport error, not a clean end).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from typing import TypeVar

import uvicorn
from starlette.types import Scope

from steadystream._gc import quiet_gc
from steadystream._serving import (
    BackgroundServer,
    ServedApp,
    new_event_loop,
    uvicorn_config,
)
from steadystream._tasks import cancel_and_wait
from steadystream._uvicorn import connection_of
from steadystream.lab.app import LabState, create_app
from steadystream.lab.engine import LabEngine
from steadystream.lab.responses import ConnectionResetter
from steadystream.lab.scenario import Scenario
from steadystream.lab.truth import RequestTruth
from steadystream.timeline import Timeline

__all__ = ["LabServer", "serve"]

_T = TypeVar("_T")
_LINGER_RESET = struct.pack("ii", 1, 0)
_DRAIN_WAIT_S = 0.2
_EXIT_POLL_S = 0.1


def _resetter(server: uvicorn.Server) -> ConnectionResetter:
    async def reset(scope: Scope) -> bool:
        connection = connection_of(server, scope)
        if connection is None and scope.get("client") is not None:
            return True  # closed already (the client left as the fault fired): nothing to reset
        transport = getattr(connection, "transport", None)
        if transport is None:
            return False
        # Let what was written reach the client first: an RST discards unsent data.
        waited = 0.0
        while transport.get_write_buffer_size() and waited < _DRAIN_WAIT_S:
            await asyncio.sleep(0.005)
            waited += 0.005
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        transport.abort()
        return True

    return reset


def serve(
    scenario: Scenario | str = "steady",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    seed: int = 0,
    on_done: Callable[[RequestTruth], None] | None = None,
    log_level: str = "info",
) -> None:
    """Serve the lab until interrupted (Ctrl-C)."""
    app = create_app(scenario, seed=seed, on_done=on_done)
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level))
    state: LabState = app.state.lab
    state.resetter = _resetter(server)
    quiet_gc()

    async def run() -> None:
        watcher = asyncio.ensure_future(_end_streams_on_exit(server, state.engine))
        try:
            await server.serve()
        finally:
            await cancel_and_wait(watcher)

    with asyncio.Runner(loop_factory=new_event_loop) as runner:  # as uvicorn's run() does
        runner.run(run())


async def _end_streams_on_exit(server: uvicorn.Server, engine: LabEngine) -> None:
    """Once the server is told to stop (Ctrl-C), end the open streams as a shutdown.

    uvicorn waits for open responses before the app's own shutdown, and cancels them after
    its graceful time: a stalled stream would end in a traceback, its ground truth never
    recorded. Ended here, each gets its shutdown error event and its record at once (as
    :class:`LabServer` does before it stops).
    """
    while not server.should_exit:
        await asyncio.sleep(_EXIT_POLL_S)
    await engine.stop()


class LabServer(ServedApp):
    """The lab on a free loopback port, in a background thread; a context manager."""

    name = "the lab"

    def __init__(
        self,
        scenario: Scenario | str = "steady",
        *,
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        on_done: Callable[[RequestTruth], None] | None = None,
        log_level: str = "warning",
    ) -> None:
        super().__init__(
            create_app(scenario, seed=seed, on_done=on_done),
            host=host,
            port=port,
            log_level=log_level,
        )

    # -- what a test needs ----------------------------------------------------------------------

    @property
    def state(self) -> LabState:
        state: LabState = self.app.state.lab
        return state

    @property
    def engine(self) -> LabEngine:
        return self.state.engine

    def truth(self, request_id: str) -> RequestTruth | None:
        """A request's ground truth (read it once the request is done)."""
        return self.call_in_loop(lambda: self.engine.truth(request_id))

    def timeline(self, request_id: str, *, keep_text: bool = False) -> Timeline | None:
        """A request's ground truth as a timeline (``where = lab``)."""

        def build() -> Timeline | None:
            truth = self.engine.truth(request_id)
            return None if truth is None else truth.to_timeline(keep_text=keep_text)

        return self.call_in_loop(build)

    # -- lifecycle ------------------------------------------------------------------------------

    def _attach(self, server: uvicorn.Server) -> None:
        self.state.resetter = _resetter(server)

    def _detach(self, background: BackgroundServer) -> None:
        # End open streams first, so their writers finish before uvicorn shuts down.
        with contextlib.suppress(Exception):
            background.run_in_loop(self.engine.stop())
