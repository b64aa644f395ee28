"""TLS over memory buffers, so that the ciphertext reads keep their kernel stamps.

An ``ssl.SSLSocket`` reads the socket itself with ``recv`` and the stamp is lost; an
``ssl.SSLObject`` is fed the bytes we read with ``recvmsg``, and each plaintext it gives
back carries the stamp of the ciphertext read that completed it.

Two things every new upstream connection would otherwise pay again (measured: the default
context, with a system's CA bundle, costs ~24 ms of CPU to make):

- :func:`default_context` makes the default client context once per process (again only
  when ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` changes), not once per connection;
- a session's ticket is kept per context, host and port (:class:`TlsSession` ``keep``), and
  the next connection there offers it: a resumed handshake skips the certificate chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections import OrderedDict

from steadystream._exceptions import UpstreamConnectError, UpstreamStreamError

__all__ = ["TlsSession", "default_context"]

_HANDSHAKE_READ = 1 << 16
_MAX_SESSIONS = 256  # upstreams whose last session is kept for the next connection

_defaults: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_sessions: OrderedDict[tuple[int, str, int], ssl.SSLSession] = OrderedDict()


def default_context() -> ssl.SSLContext:
    """The default client context (``ssl.create_default_context()``), made once per process
    and per ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _defaults.get(key)
    if context is None:
        if len(_defaults) >= 8:  # (the variables change in tests, not in a server's life)
            _defaults.clear()
        context = _defaults[key] = ssl.create_default_context()
    return context


class TlsSession:
    """One client TLS session over a connected, non-blocking socket."""

    __slots__ = ("_incoming", "_key", "_object", "_outgoing", "_sock")

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str, port: int = 443
    ) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._key = (id(context), server_hostname, port)
        session = _sessions.get(self._key)
        try:
            self._object = context.wrap_bio(
                self._incoming,
                self._outgoing,
                server_side=False,
                server_hostname=server_hostname,
                session=session,
            )
        except ValueError:  # a kept session of another context that had the same id
            _sessions.pop(self._key, None)
            self._object = context.wrap_bio(
                self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
            )

    @property
    def resumed(self) -> bool:
        """Whether the handshake resumed a kept session."""
        return self._object.session_reused

    def keep(self) -> None:
        """Keep this session's ticket for the next connection to the same upstream (called
        once the exchange is over: TLS 1.3 sends tickets after the handshake). A resumed
        session is kept already: reading a session copies it, certificate chain and all
        (CPython's workaround of an OpenSSL bug), which costs more than the handshake saved."""
        if self._key in _sessions and self._object.session_reused:
            return
        try:
            session = self._object.session
        except (ssl.SSLError, ValueError):
            return
        if session is None or not session.has_ticket:
            return
        _sessions[self._key] = session
        _sessions.move_to_end(self._key)
        while len(_sessions) > _MAX_SESSIONS:
            _sessions.popitem(last=False)

    async def handshake(self, where: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    self._object.do_handshake()
                    await self._flush()
                    return
                except ssl.SSLWantReadError:
                    await self._flush()
                    data = await loop.sock_recv(self._sock, _HANDSHAKE_READ)
                    if not data:
                        raise UpstreamConnectError(
                            f"TLS failure talking to {where}: the server closed the connection "
                            "during the handshake"
                        ) from None
                    self._incoming.write(data)
        except ssl.SSLError as exc:
            raise UpstreamConnectError(f"TLS failure talking to {where}: {exc}") from exc

    async def send(self, plaintext: bytes) -> None:
        self._object.write(plaintext)
        await self._flush()

    def decrypt(self, ciphertext: bytes) -> bytes:
        """The plaintext that ``ciphertext`` completes (b"" while a record is partial)."""
        incoming = self._incoming
        tls = self._object
        incoming.write(ciphertext)
        pieces = []
        try:
            while True:
                piece = tls.read(1 << 16)
                if not piece:
                    break
                pieces.append(piece)
                if not incoming.pending and not tls.pending():
                    break  # all read (most reads: one record, and no exception to raise)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            pass  # close_notify: the end of the body shows as the socket's end
        except ssl.SSLError as exc:
            raise UpstreamStreamError(f"TLS failure mid-stream: {exc}") from exc
        if self._outgoing.pending:
            # A key update or a close_notify reply; best effort, never blocking the reader.
            with contextlib.suppress(OSError):
                self._sock.send(self._outgoing.read())
        return b"".join(pieces)

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await asyncio.get_running_loop().sock_sendall(self._sock, self._outgoing.read())
