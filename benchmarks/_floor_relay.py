"""The least a Python relay can do per event: the floor under the gateway's cost.

    python benchmarks/_floor_relay.py UPSTREAM_URL PORT [--mode bytes|events]

Not a product: a yardstick for ``bench_gateway.py`` (``BENCH_GATEWAY_ARGV``). One uvloop
event loop, asyncio protocols on both sides, httptools for HTTP, no ASGI server, no task per
stream. Each request gets its own upstream connection (as the gateway's do), the request body
is forwarded untouched, and the answer goes back chunked:

- ``bytes``: each upstream body read is written to the client as it came (nothing looked at);
- ``events``: reads are cut at SSE event boundaries, each event's JSON is parsed (orjson) and
  its text taken, and its arrival is stamped in a list, as a measuring relay must at least do.

What it leaves out is everything the gateway is for (kernel stamps, watchdog, failover,
redaction, bounds, recording, metrics), so its cost per event is a lower bound for any relay
written in Python on this loop, not a target.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_SMALL = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok"
_EMPTY = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\ncontent-type: text/plain\r\n\r\n"


class Upstream(asyncio.Protocol):
    """One upstream exchange, relayed to one client transport."""

    def __init__(self, client: asyncio.Transport, events: bool) -> None:
        self.client = client
        self.events = events
        self.parser = httptools.HttpResponseParser(self)
        self.carry = b""
        self.stamps: list[int] = []
        self.texts: list[str] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        self.client.write(_HEAD)

    def on_body(self, body: bytes) -> None:
        if self.events:
            body = self.carry + body
            end = body.rfind(b"\n\n") + 2
            self.carry = body[end:]
            body = body[:end]
            if not body:
                return
            now = time.monotonic_ns()
            for event in body.split(b"\n\n")[:-1]:
                data = event.partition(b"data: ")[2]
                if data.startswith(b"{"):
                    choices = orjson.loads(data).get("choices") or [{}]
                    delta = choices[0].get("delta") or {}
                    self.texts.append(delta.get("content") or "")
                    self.stamps.append(now)
        self.client.write(b"%x\r\n%b\r\n" % (len(body), body))

    def on_message_complete(self) -> None:
        self.client.write(b"0\r\n\r\n")
        if self.transport is not None:
            self.transport.close()


class Client(asyncio.Protocol):
    """One client connection: requests in, answers relayed from the upstream."""

    def __init__(self, upstream: tuple[str, int, str], events: bool) -> None:
        self.upstream = upstream
        self.events = events
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, self.url = self.url, b""
        body, self.body = b"".join(self.body), []
        headers, self.headers = self.headers, []
        assert self.transport is not None
        if not url.endswith(b"/completions"):
            self.transport.write(_SMALL if url.endswith(b"/healthz") else _EMPTY)
            return
        asyncio.get_running_loop().create_task(self.relay(url, headers, body))

    async def relay(self, url: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        host, port, prefix = self.upstream
        path = prefix.encode() + url.removeprefix(b"/v1")
        kept = b"".join(
            b"%b: %b\r\n" % (name, value)
            for name, value in headers
            if name.lower() in (b"content-type", b"x-request-id")
        )
        request = (
            b"POST %b HTTP/1.1\r\nhost: %b:%d\r\n%bcontent-length: %d\r\nconnection: close\r\n\r\n"
            % (path, host.encode(), port, kept, len(body))
        ) + body
        loop = asyncio.get_running_loop()
        client = self.transport
        assert client is not None
        transport, _ = await loop.create_connection(
            lambda: Upstream(client, self.events), host, port
        )
        transport.write(request)


async def serve(upstream: str, port: int, events: bool) -> None:
    parts = urlsplit(upstream)
    target = (parts.hostname or "127.0.0.1", parts.port or 80, parts.path.rstrip("/"))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Client(target, events), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream")
    parser.add_argument("port", type=int)
    parser.add_argument("--mode", choices=["bytes", "events"], default="events")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):  # how bench_gateway.py stops it
        uvloop.run(serve(args.upstream, args.port, args.mode == "events"))


if __name__ == "__main__":
    main()
