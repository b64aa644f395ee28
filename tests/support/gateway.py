"""What the gateway's tests share: configurations, an SSE client on a real socket, an in-memory
sink, and ways to wait for what the servers finish after the body.

Integration tests run the lab (:class:`LabServer`) and the gateway (:class:`GatewayServer`)
on loopback in background threads; every server is stopped by its ``with`` block.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson

from steadystream import EventKind, Timeline, Where
from steadystream.gateway import GatewayConfig, config_from_mapping
from steadystream.lab import LabServer, RequestTruth
from steadystream.protocol import SseComment, SseEvent, is_done, new_decoder, parse_chunk

MS = 1_000_000
T = TypeVar("T")

MESSAGES = [{"role": "user", "content": "Tell me about steady streams."}]


def upstream(
    lab: LabServer, name: str, *, fault: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An upstream entry for ``lab``; ``fault`` goes out as its X-Lab-Fault header."""
    entry: dict[str, Any] = {"name": name, "base_url": lab.base_url, **extra}
    if fault is not None:
        entry["headers"] = {"X-Lab-Fault": fault}
    return entry


def gateway_config(*upstreams: dict[str, Any], **sections: Any) -> GatewayConfig:
    """A configuration with test-sized timeouts unless told otherwise: long enough that a
    busy machine's pause (a collection over a test worker's heap, a neighbour's burst) is no
    stall of a healthy lab, short enough that a fault's stall ends a test in a second."""
    data: dict[str, Any] = {
        "upstreams": list(upstreams),
        "watchdog": {"first_token_timeout": "3s", "stall_timeout": "1s"},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return config_from_mapping(data)


def chat_body(max_tokens: int = 20, **extra: Any) -> dict[str, Any]:
    return {"model": "lab", "messages": MESSAGES, "stream": True, "max_tokens": max_tokens, **extra}


@dataclass
class Streamed:
    """A streamed response as the client saw it: items stamped on arrival."""

    status: int
    headers: dict[str, str]
    items: list[tuple[int, SseEvent | SseComment]] = field(default_factory=list)
    body: bytes = b""

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def events(self) -> list[tuple[int, str]]:
        return [(t, i.data) for t, i in self.items if isinstance(i, SseEvent)]

    @property
    def chunks(self) -> list[tuple[int, Any]]:
        return [(t, parse_chunk(d)) for t, d in self.events if not is_done(d)]

    @property
    def text(self) -> str:
        return "".join(c.text for _, c in self.chunks)

    @property
    def done(self) -> bool:
        return any(is_done(d) for _, d in self.events)

    @property
    def error(self) -> str | None:
        errors = [c.error for _, c in self.chunks if c.error is not None]
        return errors[0] if errors else None

    @property
    def comments(self) -> list[str]:
        return [i.text for _, i in self.items if isinstance(i, SseComment)]

    @property
    def roles(self) -> int:
        return sum(1 for _, d in self.events if '"role"' in d)


def post(
    base_url: str,
    path: str,
    body: dict[str, Any] | bytes,
    headers: dict[str, str] | None = None,
    *,
    timeout: float = 30.0,
) -> Streamed:
    """POST and read the whole response, stamping each SSE item on the read that completed it."""
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        connection.request(
            "POST",
            f"{url.path}{path}",
            body=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        response = connection.getresponse()
        result = Streamed(response.status, {k.lower(): v for k, v in response.getheaders()})
        decoder = new_decoder()  # the build under test's (tests/conftest.py ``build``)
        raw = bytearray()
        while chunk := response.read1(65536):
            now = time.perf_counter_ns()
            raw += chunk
            if result.headers.get("content-type", "").startswith("text/event-stream"):
                result.items += [(now, item) for item in decoder.feed(chunk)]
        result.body = bytes(raw)
        return result
    finally:
        connection.close()


def get(base_url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def raw_request(base_url: str, path: str, body: dict[str, Any], **headers: str) -> bytes:
    """The bytes of an HTTP/1.1 POST, for clients that must control their socket."""
    url = urlsplit(base_url)
    data = orjson.dumps(body)
    lines = [
        f"POST {url.path}{path} HTTP/1.1",
        f"Host: {url.hostname}:{url.port}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def connect(base_url: str, *, rcvbuf: int | None = None) -> socket.socket:
    url = urlsplit(base_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((url.hostname or "", url.port or 80))
    return sock


def read_until(sock: socket.socket, marker: bytes, *, count: int = 1) -> bytes:
    data = b""
    while data.count(marker) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def wait_for(probe: Callable[[], T | None], *, timeout: float = 10.0, what: str = "it") -> T:
    """Poll ``probe`` until it returns something (servers finish their records after the body)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def finished_truth(lab: LabServer, request_id: str) -> RequestTruth:
    def probe() -> RequestTruth | None:
        truth = lab.truth(request_id)
        return truth if truth is not None and truth.done else None

    return wait_for(probe, what=f"the lab to finish {request_id}")


def answer(truth: RequestTruth) -> list[str]:
    """The content pieces the lab wrote for a request, in order."""
    return [
        text
        for kind, text in zip(truth.kinds, truth.texts, strict=True)
        if kind == EventKind.CONTENT
    ]


def wall_time(truth: RequestTruth, instant_ns: int | None) -> float:
    """A lab instant (its clock) as wall-clock seconds."""
    assert instant_ns is not None
    return truth.started_at + (instant_ns - truth.arrival_ns) / 1e9


class MemorySink:
    """Keeps finished streams in memory; tests wait for a request id."""

    def __init__(self) -> None:
        self.timelines: list[Timeline] = []
        self._changed = threading.Condition()

    def write(self, timelines: Sequence[Timeline]) -> None:
        with self._changed:
            self.timelines.extend(timelines)
            self._changed.notify_all()

    def close(self) -> None:
        pass

    def edges(self, request_id: str, *, timeout: float = 10.0) -> tuple[Timeline, Timeline]:
        """(upstream, downstream) of a request, once the gateway finished it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = {t.where: t for t in self.timelines if t.stream_id == request_id}
                if len(found) == 2:
                    return found[Where.GATEWAY_UPSTREAM], found[Where.GATEWAY_DOWNSTREAM]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the gateway recorded no stream {request_id!r}")
                self._changed.wait(left)
