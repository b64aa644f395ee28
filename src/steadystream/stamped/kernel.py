"""Kernel receive stamps: turn them on for a socket, read them from ``recvmsg``, map them.

Linux stamps every packet as it reaches the socket (``SO_TIMESTAMPNS``) and hands the
stamp of the last packet a read copied from to ``recvmsg`` as ancillary data
(``SCM_TIMESTAMPNS``, a ``struct timespec`` on ``CLOCK_REALTIME``). Python's ``socket``
module does not name the option, so its value is this module's; whether it works is
never assumed: :func:`kernel_stamps_available` asks the kernel once, over loopback (some
sandboxes accept the option and never deliver a stamp).

Stamps are wall-clock; timelines are offsets on a monotonic clock. :class:`WallToClock`
maps one to the other with an offset sampled when a stream opens, and samples it again
when the stream ends: a clock step (NTP, a VM resumed) while the stream was open shows as
the difference, recorded in the stream's meta rather than silently shifting its stamps.

The kernel merges small segments that wait in a socket's receive queue into one buffer
and gives the merged buffer the newest segment's stamp (``tcp_try_coalesce``). So a stamp
is exact for every event that was read before the next one arrived; events that waited
together share the last one's stamp, and no peek or exact-length read can separate them.
:mod:`steadystream.stamped.rescue` keeps queues short while the event loop is stalled.
"""

from __future__ import annotations

import atexit
import functools
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable

__all__ = [
    "ANCILLARY_SIZE",
    "SO_TIMESTAMPNS",
    "WallToClock",
    "enable_stamps",
    "kernel_stamps_available",
    "stamp_from_ancillary",
]

SO_TIMESTAMPNS = 35  # asm-generic (x86-64, arm64, riscv, powerpc); SCM_TIMESTAMPNS is the same
ANCILLARY_SIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 64
_TIMESPEC = struct.Struct("@qq")
_SOL_SOCKET = socket.SOL_SOCKET


def enable_stamps(sock: socket.socket) -> None:
    """Ask the kernel to stamp ``sock``'s incoming packets (raises OSError if it cannot)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def stamp_from_ancillary(ancillary: Iterable[tuple[int, int, bytes]]) -> int | None:
    """The kernel's wall-clock receive stamp (ns) in a ``recvmsg`` ancillary list, or None."""
    for level, kind, data in ancillary:
        if level == _SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanos = _TIMESPEC.unpack_from(data)
            stamp: int = seconds * 1_000_000_000 + nanos
            return stamp
    return None


_KEEPER: list[socket.socket] = []


@functools.cache
def kernel_stamps_available() -> bool:
    """True when this platform delivers kernel receive stamps on TCP (asked once, loopback).

    Linux turns packet stamping on for the whole host while any socket wants it, and turns
    it on lazily (from a work queue): packets that arrive in between carry no stamp. So the
    first caller also keeps one stamping socket open for the life of the process, and the
    probe sends until a stamp comes back (a few tries).
    """
    if not sys.platform.startswith("linux") or not hasattr(socket.socket, "recvmsg"):
        return False
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        enable_stamps(keeper)
        _KEEPER.append(keeper)
        atexit.register(keeper.close)  # (else the interpreter warns of it on the way out)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=2.0) as client:
                peer, _ = server.accept()
                with peer:
                    enable_stamps(client)
                    for attempt in range(5):
                        peer.sendall(b"x")
                        _, ancillary, _, _ = client.recvmsg(1, ANCILLARY_SIZE)
                        if stamp_from_ancillary(ancillary) is not None:
                            return True
                        time.sleep(0.002 * (attempt + 1))
                    return False
    except OSError:
        return False


class WallToClock:
    """Maps wall-clock kernel stamps onto a monotonic clock, with one offset per stream."""

    __slots__ = ("_now_ns", "offset_ns")

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self.offset_ns = self._sample()

    def _sample(self) -> int:
        # Bracket the wall-clock read with two monotonic reads and take their midpoint: the
        # offset is then good to half the bracket (well under a microsecond).
        before = self._now_ns()
        wall = time.time_ns()
        after = self._now_ns()
        return (before + after) // 2 - wall

    def to_clock(self, wall_ns: int) -> int:
        return wall_ns + self.offset_ns

    def step_ns(self) -> int:
        """How far the wall clock stepped against the monotonic one since the offset was taken."""
        return self.offset_ns - self._sample()
