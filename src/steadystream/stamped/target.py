"""Where a stamped request goes, how its host is reached, and the response head it gets."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from steadystream._exceptions import UpstreamConnectError

__all__ = ["Resolve", "ResponseHead", "Target", "connect", "phrase", "reason"]

Resolve = Callable[[str, int], Awaitable[list[tuple[int, tuple[Any, ...]]]]]
"""Host and port to ``(family, address)`` pairs; replaces the system resolver (tests)."""


class Target(NamedTuple):
    """Where a request goes: scheme, host, port and the request target (path and query)."""

    secure: bool
    host: str
    port: int
    path: str

    @classmethod
    def from_url(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(secure, parts.hostname, port, path)

    @property
    def origin(self) -> str:
        return f"{'https' if self.secure else 'http'}://{self.host_header}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.secure else 80
        return host if self.port == default else f"{host}:{self.port}"


class ResponseHead(NamedTuple):
    status: int
    reason: str
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    header_ns: int  # the stamp of the read that completed the head


async def connect(target: Target, where: str, resolve: Resolve | None) -> socket.socket:
    loop = asyncio.get_running_loop()
    try:
        if resolve is not None:
            addresses = await resolve(target.host, target.port)
        elif (literal := _ip_literal(target.host, target.port)) is not None:
            addresses = [literal]  # no lookup (a thread of the resolver's pool) for an address
        else:
            infos = await loop.getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
            addresses = [(family, address) for family, _, _, _, address in infos]
    except OSError as exc:  # socket.gaierror, or a resolver's own OSError
        raise UpstreamConnectError(f"DNS failure: cannot resolve the host of {where}") from exc
    last: OSError | None = None
    for family, address in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await _connect(loop, sock, address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    why = reason(last) if last is not None else "no address"
    try:
        raise UpstreamConnectError(f"cannot connect to {where}: {why}") from last
    finally:
        last = None  # its traceback holds this frame: no cycle through the frame's locals


async def _connect(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: tuple[Any, ...]
) -> None:
    """``loop.sock_connect`` for a resolved address, without its lookup.

    uvloop's ``sock_connect`` resolves the address again on every call, through its thread
    pool (it asks for no socket type, so its own shortcut for addresses does not apply): a
    thread's round trip per connection, most of what a loopback connect cost the gateway.
    """
    try:
        sock.connect(address)
        return
    except (BlockingIOError, InterruptedError):
        pass
    done = loop.create_future()

    def writable() -> None:
        if not done.done():
            done.set_result(None)

    fd = sock.fileno()
    loop.add_writer(fd, writable)
    try:
        await done
    finally:
        loop.remove_writer(fd)
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, f"Connect call failed {address}: {os.strerror(error)}")


def _ip_literal(host: str, port: int) -> tuple[int, tuple[Any, ...]] | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.version == 6:
        return socket.AF_INET6, (host, port, 0, 0)
    return socket.AF_INET, (host, port)


def phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def reason(exc: OSError) -> str:
    # asyncio words a refusal "Connect call failed (...)"; the errno says what happened.
    return os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc) or type(exc).__name__)
