"""TLS over memory buffers, so that the ciphertext reads keep their kernel stamps.

An ``ssl.SSLSocket`` reads the socket itself with ``recv`` and the stamp is lost; an
``ssl.SSLObject`` is fed the bytes we read with ``recvmsg``, and each plaintext it gives
back carries the stamp of the ciphertext read that completed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl

from steadystream._exceptions import UpstreamConnectError, UpstreamStreamError

__all__ = ["TlsSession"]

_HANDSHAKE_READ = 1 << 16


class TlsSession:
    """One client TLS session over a connected, non-blocking socket."""

    __slots__ = ("_incoming", "_object", "_outgoing", "_sock")

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._object = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )

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
        self._incoming.write(ciphertext)
        pieces = []
        try:
            while True:
                piece = self._object.read(1 << 16)
                if not piece:
                    break
                pieces.append(piece)
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
