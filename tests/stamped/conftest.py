"""A scripted raw-socket HTTP server on loopback: each test writes the bytes it wants, when."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator

import pytest

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


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script, *, read_request: bool = True) -> ScriptedServer:
        server = ScriptedServer(script, read_request=read_request)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture(autouse=True)
def _on_each_build(build: str) -> str:
    """Every test here runs on both builds of the relay's hot path (tests/conftest.py)."""
    return build
