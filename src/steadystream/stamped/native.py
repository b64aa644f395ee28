"""The native lane: the stamped connection's read path in C, where it was built.

``steadystream.stamped._lane`` (``_lane.c``) is an optional C extension, built on Linux
when a compiler is at hand (``setup.py``). Where it is missing, or ``STEADYSTREAM_NATIVE=0``
is set, every connection reads in Python, through the same code it falls back to: the
extension only ever shortens the common case (a read in the body of a plain HTTP/1.1
response, and a body piece of whole content events the client can take at once).

It is used only where its clock is the connection's: the real monotonic clock
(``time.perf_counter_ns`` reads ``CLOCK_MONOTONIC`` on Linux, as the extension does), on a
plaintext connection (TLS is decrypted in Python).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
import weakref
from collections.abc import Callable, Sized
from types import ModuleType
from typing import Any, Protocol

__all__ = [
    "Lane",
    "NativeLane",
    "Reactor",
    "describe",
    "lane_maker",
    "native_module",
    "reactor_for",
]

_native: ModuleType | None
try:
    # By name: the extension is a leaf (it imports nothing of this project), and an import
    # statement naming it would read as an import of this package, which imports this module.
    _native = importlib.import_module("steadystream.stamped._lane")
except ImportError:  # not built here: the Python path does the same work
    _native = None


class Lane(Protocol):
    """What the extension's ``Lane`` is (``_lane.c`` documents each part)."""

    pulling: bool

    def readable(self) -> None: ...
    def on_body(self, body: bytes) -> None: ...
    def on_message_complete(self) -> None: ...
    def bind(self, feed: Callable[[bytes], None]) -> None: ...
    def arm(
        self,
        *,
        attempt: Any,
        cutter: Any,
        watchdog: Any,
        waiting: Sized,
        outlet: Any,
        transport: Any,
        scrub: Callable[[bytes], bytes] | None,
        received_ns: int,
        max_event_bytes: int,
        client_fd: int = -1,
    ) -> None: ...
    def hold(self) -> None: ...
    def resume(self) -> None: ...
    def take_records(self) -> tuple[bytes, bytes, bytes, bytes, list[str]] | None: ...
    def release(self) -> None: ...
    @property
    def last_activity(self) -> float: ...
    @property
    def armed(self) -> bool: ...
    @property
    def pieces_taken(self) -> int: ...
    @property
    def events_taken(self) -> int: ...


NativeLane: Callable[..., Lane] | None = None if _native is None else _native.Lane
"""Makes a :class:`Lane`: ``NativeLane(conn, *, fd, kernel, offset_ns, pending, queued)``;
None where the extension was not built."""

_MONOTONIC = (
    sys.platform.startswith("linux")
    and time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"
)


def native_module() -> ModuleType | None:
    """The extension, when it was built and is not turned off."""
    if _native is None or os.environ.get("STEADYSTREAM_NATIVE", "1") == "0":
        return None
    return _native


class Reactor(Protocol):
    """What the extension's ``Reactor`` is: the native lanes of one event loop, read from one
    epoll set whose descriptor the loop watches (``_lane.c``)."""

    def add(self, fd: int, lane: Lane, /) -> None: ...
    def remove(self, fd: int, /) -> None: ...
    def run(self) -> None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...
    @property
    def watched(self) -> int: ...


# One reactor per event loop, as one stall rescuer (rescue.py): what they serve belongs to
# the loop, not to any one connection that could own them; they go with the loop.
_reactors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Reactor] = (
    weakref.WeakKeyDictionary()
)


def reactor_for(loop: asyncio.AbstractEventLoop) -> Reactor:
    """The loop's reactor, made and watched by the loop the first time (it lives as long
    as the loop; its descriptor is closed with it)."""
    reactor = _reactors.get(loop)
    if reactor is None:
        assert _native is not None  # (only lanes use it, and lanes come from it)
        reactor = _native.Reactor()
        loop.add_reader(reactor.fileno(), reactor.run)
        _reactors[loop] = reactor
    return reactor


def describe() -> str:
    """Which lane relays, in words (the gateway says so when it starts)."""
    if not _MONOTONIC:
        return "the Python lane (the native lane is built and used on Linux only)"
    if _native is None:
        return "the Python lane (the native lane was not built: it needs a C compiler at install)"
    if native_module() is None:
        return "the Python lane (the native lane is off: STEADYSTREAM_NATIVE=0)"
    return "the native lane"


def lane_maker(now_ns: Callable[[], int]) -> Callable[..., Lane] | None:
    """What makes the native lane of a connection on this clock; None: it reads in Python."""
    if not (_MONOTONIC and now_ns is time.perf_counter_ns) or native_module() is None:
        return None
    return NativeLane
