"""Everything steadystream takes from uvicorn beyond ASGI, in one module.

ASGI gives an app ``receive`` and ``send``; a relay that writes each upstream read to its
client from the read callback, with no await, needs more: the client's transport, and
whether uvicorn frames the response in HTTP/1.1 chunks that may be written between its own
sends. Servers also need a slow-loris bound on request heads, and HTTP/1.0 clients need
close-delimited bodies, which uvicorn's httptools protocol does not give. All of that reads
or extends uvicorn's internals (its request-response cycle, its protocol class, its server
state), which no release promises to keep: they are reached here and nowhere else, and
``tests/test_uvicorn_contract.py`` pins each one against the uvicorn versions
``constraints.txt`` allows, so an upgrade that moves them fails that test, not a stream.

- :func:`client_link`: a request's :class:`ClientLink` (its transport; whether frames may be
  written to it), found from uvicorn's ``send``.
- :func:`frame`: the one HTTP/1.1 chunk framer (what uvicorn writes for a body send).
- :func:`http_protocol`: uvicorn's HTTP protocol with the head timeout and HTTP/1.0 framing.
- :func:`connection_of`: a request's connection among uvicorn's open ones (its client).
- :func:`shutting_down`: whether the server is shutting down (its requests are cancelled
  once its graceful time is over).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NamedTuple

import uvicorn
from starlette.types import Scope, Send
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.auto import AutoHTTPProtocol

__all__ = [
    "KNOWN_VERSIONS",
    "ClientLink",
    "client_link",
    "connection_of",
    "frame",
    "http_protocol",
    "shutting_down",
]

KNOWN_VERSIONS = ((0, 29), (0, 54))
"""The uvicorn releases (major, minor; first and last) whose internals this module was
checked against (tests/test_uvicorn_contract.py)."""


class ClientLink(NamedTuple):
    """What a relay may do with a request's client connection besides ``send``."""

    transport: asyncio.WriteTransport | None
    """The client's connection (None: not found), for its write buffer, a direct write, an
    abort of a stuck client."""
    frames: bool
    """uvicorn frames this response in chunks and keeps no count of them, so a chunk
    (:func:`frame`) written to the transport between its sends is framed as its own are."""


_NO_LINK = ClientLink(None, False)


def frame(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk, as uvicorn's httptools protocol writes a body send."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def client_link(server: uvicorn.Server) -> Callable[[Scope, Send], ClientLink]:
    """Finds a request's link: from uvicorn's own ``send`` when nothing wrapped it (its
    request-response cycle), else among the server's connections (by the client's address
    and port), which cannot tell about framing."""

    def find(scope: Scope, send: Send) -> ClientLink:
        cycle = getattr(send, "__self__", None)  # uvicorn's request-response cycle
        if cycle is not None and getattr(cycle, "scope", None) is scope:
            transport = getattr(cycle, "transport", None)
            frames = (
                scope.get("http_version") != "1.0"
                and isinstance(cycle, httptools_impl.RequestResponseCycle)
                and cycle.chunked_encoding is True
                and cycle.response_started
                and not cycle.response_complete
            )
        else:
            transport = getattr(connection_of(server, scope), "transport", None)
            frames = False
        # uvloop's transports do not derive from asyncio's: check what is used.
        if not (hasattr(transport, "get_write_buffer_size") and hasattr(transport, "abort")):
            return _NO_LINK
        return ClientLink(transport, frames and transport is not None)

    return find


def shutting_down(server: uvicorn.Server) -> Callable[[], bool]:
    """Whether ``server`` is shutting down: a signal or ``should_exit`` set, uvicorn's own
    flag for both."""
    return lambda: bool(server.should_exit)


def connection_of(server: uvicorn.Server, scope: Scope) -> Any | None:
    """The uvicorn connection (protocol object) serving a request, or None.

    The ASGI scope carries no handle on the transport; uvicorn's server state lists every
    open connection with its client's address, which is unique per connection.
    """
    client = scope.get("client")
    if client is None:
        return None
    for connection in list(server.server_state.connections):
        if getattr(connection, "client", None) == tuple(client):
            return connection
    return None


def http_protocol(head_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, closing connections whose request head is late and
    sending HTTP/1.0 clients close-delimited bodies.

    uvicorn bounds an idle kept-alive connection (``timeout_keep_alive``) and its parsers
    bound a head's size, but nothing bounds how long a head may take to trickle in: this
    closes a connection whose head has not arrived ``head_timeout_s`` after it opened, or
    after the first byte of a next request on a kept-alive connection.

    HTTP/1.0 has no chunked coding: a body whose length is not known when it starts (an
    event stream) goes out as it comes and ends where the connection closes (RFC 9112,
    section 6.3). uvicorn's httptools protocol chunks such a body whatever the request's
    version, and an HTTP/1.0 client (nginx's default towards its upstreams, ``curl -0``)
    reads the chunk sizes as data. (h11, uvicorn's other protocol, does this itself.)
    """
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
            self._head_timer = self.loop.call_later(head_timeout_s, self._head_late)

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
    Content-Length is sent close-delimited (see :func:`http_protocol`)."""

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
