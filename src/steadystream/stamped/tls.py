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

The end of the stream is the TLS layer's to tell as much as the socket's: a close_notify
ends it at once (a server that keeps the socket open after it would hold the reader until
the read timeout), and a socket that ends inside a record cut the body, even where the body
is delimited by the close. Messages name the failure in OpenSSL's words, never the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections import OrderedDict

from steadystream._exceptions import UpstreamConnectError
from steadystream.stamped.target import reason

__all__ = ["TlsSession", "default_context"]

_HANDSHAKE_READ = 1 << 16
_RECORD_PLAINTEXT = 1 << 14  # the most one record holds: a read of more allocates for nothing
_HEADER = 5  # a record's header: type, version, and the length of what follows (big-endian)
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"}
)
_MAX_SESSIONS = 256  # upstreams whose last session is kept for the next connection

_defaults: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_sessions: OrderedDict[tuple[int, str, int], ssl.SSLSession] = OrderedDict()


def _describe(exc: ssl.SSLError) -> str:
    """What went wrong, in OpenSSL's words (``reason``), without its source line; a server's
    bytes never show in these (a certificate's names neither: only the host we asked for)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    code = exc.reason
    if not code:
        return type(exc).__name__
    words = code.lower().replace("_", " ")
    for prefix in ("sslv3 alert ", "tlsv1 alert ", "tlsv13 alert "):
        if words.startswith(prefix):
            return f"the server sent a TLS alert: {words.removeprefix(prefix)}"
    if code in _NOT_TLS:
        return f"{words} (the server's bytes are not TLS records)"
    return words


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

    __slots__ = (
        "_header",
        "_incoming",
        "_kept",
        "_key",
        "_left",
        "_object",
        "_outgoing",
        "_sock",
        "end",
    )

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str, port: int = 443
    ) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._key = (id(context), server_hostname, port)
        self._left = 0  # ciphertext bytes still to come of the record read last
        self._header = b""  # the start of a record header cut by a read
        self._kept = False  # whether keep() kept (or dropped) this session's ticket
        # None while the stream is open; "" once the server's close_notify ended it, or why
        # it failed (:meth:`decrypt` sets it, behind the plaintext before the end).
        self.end: str | None = None
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
    def inside_record(self) -> bool:
        """Whether the bytes so far end inside a record: a socket that ends here cut it."""
        return bool(self._left or self._header)

    def keep(self, *, final: bool = False) -> None:
        """Keep this session's ticket for the next connection to the same upstream (called
        once the response head is read: TLS 1.3 sends tickets after the handshake, before
        any answer; and again at the close, ``final``, for a server that sent it later). Once
        a session is kept, later calls do nothing. A resumed session is kept already:
        reading a session copies it, certificate chain and all (CPython's workaround of an
        OpenSSL bug), which costs more than the handshake saved. A full handshake that
        brought no ticket by the close drops the one kept: the server refused it and gives
        none now (it stopped issuing them, or another server answers there)."""
        if self._kept:
            return
        if self._key in _sessions and self._object.session_reused:
            self._kept = True
            return
        try:
            session = self._object.session
        except (ssl.SSLError, ValueError):
            session = None
        if session is None or not session.has_ticket:
            if final:  # (no ticket came at all)
                self._kept = True
                _sessions.pop(self._key, None)
            return
        self._kept = True
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
                    self._frame(data)  # (from the first byte: the last read may hold records)
                    self._incoming.write(data)
        except ssl.SSLError as exc:
            raise UpstreamConnectError(f"TLS failure talking to {where}: {_describe(exc)}") from exc
        except OSError as exc:  # a reset (or a broken pipe) before the handshake ended
            raise UpstreamConnectError(
                f"TLS failure talking to {where}: the connection broke during the handshake: "
                f"{reason(exc)}"
            ) from exc

    async def send(self, plaintext: bytes) -> None:
        self._object.write(plaintext)
        await self._flush()

    def decrypt(self, ciphertext: bytes) -> bytes:
        """The plaintext that ``ciphertext`` completes (b"" while a record is partial).

        A close_notify or a failure behind it sets :attr:`end`; the plaintext before it is
        still returned, for the caller to hand on before it reports the end."""
        if self.end is not None:
            return b""  # (nothing after the end is read: it is no part of the stream)
        incoming = self._incoming
        tls = self._object
        self._frame(ciphertext)
        incoming.write(ciphertext)
        pieces = []
        try:
            while True:
                piece = tls.read(_RECORD_PLAINTEXT)
                if not piece:  # (an SSLObject reads a close_notify as b"")
                    self.end = ""
                    break
                pieces.append(piece)
                if not incoming.pending:
                    # All read (most reads: one record, and no exception to raise). A read
                    # of _RECORD_PLAINTEXT takes a whole record's plaintext, so OpenSSL holds
                    # none back (``tls.pending()``, a call a read, is always 0 here); what is
                    # left is at most a record's start, which needs more bytes anyway.
                    break
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.end = ""
        except ssl.SSLError as exc:
            self.end = f"TLS failure mid-stream: {_describe(exc)}"
        if self._outgoing.pending:
            # A key update or a close_notify reply; best effort, never blocking the reader.
            with contextlib.suppress(OSError):
                self._sock.send(self._outgoing.read())
        return b"".join(pieces)

    def _frame(self, ciphertext: bytes) -> None:
        """Follow the records' boundaries (OpenSSL holds a partial record where its memory
        buffer no longer shows it): one step per record, most reads one or a few."""
        if self._header:
            ciphertext = self._header + ciphertext
            self._header = b""
        at = self._left
        size = len(ciphertext)
        while at + _HEADER <= size:
            at += _HEADER + ((ciphertext[at + 3] << 8) | ciphertext[at + 4])
        if at >= size:
            self._left = at - size
        else:
            self._left = 0
            self._header = ciphertext[at:]

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await asyncio.get_running_loop().sock_sendall(self._sock, self._outgoing.read())
