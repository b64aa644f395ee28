"""A scripted raw-socket HTTP server on loopback: each test writes the bytes it wants, when;
and one exchange with it through the stamped connection of the build under test. Also
:func:`serving`, the same on the test's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from steadystream._clock import MonotonicClock
from steadystream.stamped import StampMode, Target
from steadystream.stamped.connection import connection_type

Script = Callable[[socket.socket], None]


class ScriptedServer:
    """Accepts connections on 127.0.0.1 and runs ``script`` on each in a thread."""

    def __init__(self, script: Script, *, read_request: bool = True) -> None:
        self.script = script
        self.read_request = read_request
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(5.0)
        self.port: int = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        # perf_counter_ns just before and right after each timed write: the sender is a thread
        # of the test's process, so either side can be late (the GIL, a busy machine), and
        # the write lies in between.
        self.write_ns: list[tuple[int, int]] = []
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def _serve(self) -> None:
        try:
            peer, _ = self.listener.accept()
        except OSError:
            return
        with peer:
            peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                if self.read_request:
                    self.requests.append(read_request(peer))
                self.script(peer)
            except (OSError, ssl.SSLError) as exc:
                self.errors.append(exc)

    @property
    def running(self) -> bool:
        """The script is still running (it has not written everything yet)."""
        return self._thread.is_alive()

    def timed_write(self, peer: socket.socket, data: bytes) -> None:
        before = time.perf_counter_ns()
        peer.sendall(data)
        self.write_ns.append((before, time.perf_counter_ns()))

    def close(self) -> None:
        self.listener.close()
        self._thread.join(timeout=5.0)


def read_request(peer: socket.socket) -> bytes:
    request = b""
    while b"\r\n\r\n" not in request:
        data = peer.recv(65536)
        if not data:
            break
        request += data
    return request


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def exchange(
    url: str,
    mode: StampMode,
    *,
    read_timeout_s: float | None = 5.0,
    stop_after: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], list[tuple[int, bytes]]]:
    """POST to ``url`` and read the whole response: (status, headers, stamped body pieces)."""
    clock = MonotonicClock()
    conn = await connection_type().open(
        Target.from_url(url),
        clock,
        mode,
        read_timeout_s=read_timeout_s,
        ssl_context=ssl_context,
    )
    try:
        # The answer cannot arrive before the request began to go out. (Not ``send``'s own
        # instant: that is taken when the coroutine resumes, which on a busy machine can be
        # after the answer's first bytes were stamped.) A kernel stamp's wall-to-monotonic
        # offset is good to well under a millisecond.
        began = clock.now_ns()
        sent = await conn.send("POST", {"X-Request-ID": "r1"}, b'{"stream": true}')
        head = await conn.head()
        assert began <= sent
        assert head.header_ns >= began - 1_000_000
        pieces: list[tuple[int, bytes]] = []

        def sink(stamp: int, data: bytes) -> bool:
            pieces.append((stamp, data))
            return stop_after is not None and len(pieces) >= stop_after

        await conn.stream_body(sink)
        return head.status, head.headers, pieces
    finally:
        conn.close()


Handle = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handle: Handle) -> AsyncIterator[int]:
    """``handle`` each connection to 127.0.0.1 on the running loop; yields the port. On the
    way out what is still being handled is cancelled, each connection closed, the server
    stopped. A client that leaves mid-answer is no error of the handler's."""
    handlers: list[asyncio.Task[None]] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await handle(reader, writer)
        finally:
            writer.close()  # (also when the test's end cancels it)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()
