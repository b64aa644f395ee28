"""What the resume tests share: a reader that reads a stream's events and may leave early, and
a real ``redis-server`` (Debian's) of the test's own."""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from steadystream._processes import free_port
from steadystream.protocol import SseEvent, is_done, new_decoder, parse_chunk


@dataclass
class Read:
    """What a reader got: the status, headers, and each event's id and data, in order."""

    status: int
    headers: dict[str, str]
    events: list[tuple[str | None, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def ids(self) -> list[int]:
        return [int(i) for i, _ in self.events if i is not None]

    @property
    def last_id(self) -> str:
        return str(self.ids[-1])

    @property
    def text(self) -> str:
        return "".join(parse_chunk(d).text for _, d in self.events if not is_done(d))

    @property
    def stream_id(self) -> str:
        return self.headers["x-steadystream-stream-id"]


def read_stream(
    base: str,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    *,
    leave_after: int | None = None,
    when: tuple[int, Callable[[], None]] | None = None,
) -> Read:
    """Send a request and read its SSE events; with ``leave_after``, close the connection
    once that many events came (a reader that drops); with ``when`` (count, do), call
    ``do`` once, as soon as that many events came."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        data = None if body is None else orjson.dumps(body)
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=data, headers=all_headers)
        response = connection.getresponse()
        read = Read(response.status, {k.lower(): v for k, v in response.getheaders()})
        if not read.headers.get("content-type", "").startswith("text/event-stream"):
            read.body = response.read()
            return read
        decoder = new_decoder()
        while chunk := response.read1(65536):
            for item in decoder.feed(chunk):
                if isinstance(item, SseEvent):
                    read.events.append((item.id, item.data))
            if leave_after is not None and len(read.events) >= leave_after:
                break
            if when is not None and len(read.events) >= when[0]:
                when[1]()
                when = None
        return read
    finally:
        connection.close()


class RedisServer:
    """Debian's ``redis-server`` on a free loopback port with its own directory, nothing
    saved; stopped by its pid."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RedisServer:
        # The free port was free when it was looked up; another process may take it before
        # the server binds it (as the local port of a connection it opens, say), and the
        # server then exits at once: as a context, where nobody was given its URL yet, it
        # tries another free port, a few times.
        for _ in range(4):
            if self._launch():
                return self
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}/0"
        return self.start()

    def start(self) -> RedisServer:
        """Start it (again, after :meth:`stop`: on the same port, with nothing kept)."""
        if not self._launch():
            pytest.fail(f"redis-server did not start on port {self.port}{self.said()}")
        return self

    def _launch(self) -> bool:
        """Whether the server answers on :attr:`port` (False: it exited first)."""
        server = shutil.which("redis-server")
        if server is None:
            pytest.fail("redis-server is not installed (make system-parts installs it)")
        self.process = subprocess.Popen(
            [
                server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                str(self.directory), "--save", "", "--appendonly", "no", "--protected-mode",
                "yes", "--loglevel", "warning", "--logfile", str(self.log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not self.ping():
            if self.process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"redis-server did not answer on port {self.port} in 10 s{self.said()}")
            time.sleep(0.02)
        return True

    @property
    def log(self) -> Path:
        return self.directory / "redis-server.log"

    def said(self) -> str:
        """The last lines the server logged, for a failure's message."""
        try:
            lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "; it said: " + " | ".join(lines[-3:]) if lines else ""

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.stop()
