"""A server in a background thread stops cleanly with streams still open (steadystream/_serving.py).

The lab and the gateway run this way in tests, the demo and the benchmarks. uvicorn cancels
the requests that outlive its graceful shutdown and returns without waiting for them: a task
left pending was collected later, its ``finally`` never run on a loop and its sockets
unclosed (a ResourceWarning in whatever test ran then), and uvloop refused to close a loop
with the client's transport still open (EBUSY, an exception in the server's thread).
"""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from starlette.types import Receive, Scope, Send

from steadystream._serving import BackgroundServer, listening_socket, new_event_loop


class _Endless:
    """An app whose every response streams without end, and a task it leaves running."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.request_ended = threading.Event()
        self.task_ended = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        task = asyncio.get_running_loop().create_task(self._background())
        self._tasks.add(task)  # (held, as an app holds what it starts)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            self.started.set()
            while True:
                await send({"type": "http.response.body", "body": b"x", "more_body": True})
                await asyncio.sleep(0.05)
        finally:
            self.request_ended.set()

    async def _background(self) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            self.task_ended.set()


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_a_server_stopped_with_a_stream_open_ends_its_tasks_and_closes_its_loop(
    monkeypatch: pytest.MonkeyPatch, loop_kind: str
) -> None:
    if loop_kind == "asyncio":
        monkeypatch.setattr("steadystream._serving.new_event_loop", asyncio.new_event_loop)
    elif new_event_loop().__class__.__module__.split(".")[0] != "uvloop":
        pytest.fail("uvloop is not installed (the fast extra)")
    app = _Endless()
    server = BackgroundServer(app, listening_socket("127.0.0.1", 0), name="endless")
    failures: list[BaseException | None] = []
    before = threading.excepthook
    threading.excepthook = lambda args: failures.append(args.exc_value)
    try:
        server.start()
        loop = server.loop
        assert loop is not None
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert client.recv(65536).startswith(b"HTTP/1.1 200")
            assert app.started.wait(10)
            server.stop()  # the client is still there, reading nothing
    finally:
        threading.excepthook = before
        server.stop()
    assert failures == []  # (EBUSY from uvloop's close, before)
    assert loop.is_closed()
    assert app.request_ended.is_set()
    assert app.task_ended.is_set(), "a task the app left running was never ended"
