"""uvicorn's HTTP protocol as the gateway runs it: slow-loris bounds, and HTTP/1.0 answered right.

uvicorn bounds an idle kept-alive connection (``timeout_keep_alive``) and h11/httptools bound
a head's size, but nothing bounds how long a head may take to trickle in: 900 connections
sending a byte now and then were held for a minute. This protocol (uvicorn's own, with one
timer) closes a connection whose request head has not arrived ``timeout_s`` after it
opened, or after the first byte of a next request on a kept-alive connection. A request
whose head is in is the app's: its body is bounded by ``server.body_timeout``
(:mod:`steadystream.gateway.app`), its response by the watchdog.

HTTP/1.0 has no chunked coding: a body whose length is not known when it starts (an event
stream) is sent as it comes and ends where the connection closes (RFC 9112, section 6.3).
uvicorn's httptools protocol chunks such a body whatever the request's version, and an
HTTP/1.0 client (nginx's default towards its upstreams, ``curl -0``, old tools) reads the
chunk sizes as data. Here an HTTP/1.0 request's response without Content-Length goes out
close-delimited, with ``Connection: close``. (h11, uvicorn's other protocol, does this
itself.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.auto import AutoHTTPProtocol

__all__ = ["head_timeout_protocol"]


def head_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, closing connections whose head is late and sending
    HTTP/1.0 clients close-delimited bodies (see the module docstring)."""
    base: Any = AutoHTTPProtocol

    class HeadTimeoutProtocol(base):  # type: ignore[misc]
        _head_timer: asyncio.TimerHandle | None = None
        _head_cycle: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if self._head_timer is None and cycle is not None and cycle.response_complete:
                self._arm_head_timer()  # bytes of a next request on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._head_cycle = self.cycle
            self._head_timer = self.loop.call_later(timeout_s, self._head_late)

        def _head_late(self) -> None:
            self._head_timer = None
            transport = self.transport
            if self.cycle is self._head_cycle and not transport.is_closing():
                transport.close()  # no new request head since the timer started

        if issubclass(base, httptools_impl.HttpToolsProtocol):

            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                cycle = self.cycle
                if (
                    self.scope.get("http_version") == "1.0"
                    and type(cycle) is httptools_impl.RequestResponseCycle
                    and cycle.scope is self.scope  # (not an upgrade's: no cycle made)
                ):
                    # The cycle was made by uvicorn just now and its task has not run yet:
                    # giving it the class that frames HTTP/1.0 answers is all it takes,
                    # where making it ourselves would copy uvicorn's request setup.
                    cycle.__class__ = _Http10Cycle

    return HeadTimeoutProtocol


class _Http10Cycle(httptools_impl.RequestResponseCycle):
    """uvicorn's request-response cycle for an HTTP/1.0 request: a response without
    Content-Length is sent close-delimited (see the module docstring)."""

    _close_delimited = False

    async def send(self, message: Any) -> None:
        kind = message["type"]
        if kind == "http.response.start" and not self.response_started:
            names = {name.lower() for name, _ in message.get("headers", ())}
            if b"content-length" not in names and b"transfer-encoding" not in names:
                # uvicorn adds chunked coding where this is None; False: raw, as with a length
                self.chunked_encoding = False
                self.keep_alive = False  # the close is where the body ends
                self._close_delimited = True
        elif kind == "http.response.body" and self._close_delimited:
            # uvicorn counts a body down from its Content-Length: this one has none to meet.
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)
