"""A dead man's switch in the kernel: a timer the event loop keeps pushing back.

The rescuer's thread must act when the event loop stalls and must cost nothing while it does
not. A thread that woke every few milliseconds to look would take the GIL each time, and on a
busy machine every such hand-over is a chance for the loop's thread to lose its CPU: measured,
that alone widened the client's lag. So the thread sleeps in ``epoll_wait`` on a
``timerfd`` that the loop's heartbeat re-arms; it wakes only when the loop missed its
heartbeat (or a watched socket broke). Python 3.11 has no ``timerfd`` binding, hence
``ctypes``; where it is not available the rescuer falls back to looking periodically.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

__all__ = ["DeadlineTimer"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = 0o2000000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class DeadlineTimer:
    """A one-shot monotonic timer whose file descriptor becomes readable when it expires."""

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise OSError("timerfd is Linux only")
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._settime = libc.timerfd_settime
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd: int = fd

    def fileno(self) -> int:
        return self._fd

    def arm(self, after_ns: int) -> None:
        """Expire ``after_ns`` from now, replacing any earlier setting."""
        spec = _Itimerspec(
            _Timespec(0, 0), _Timespec(after_ns // 1_000_000_000, after_ns % 1_000_000_000)
        )
        self._settime(self._fd, 0, ctypes.byref(spec), None)

    def clear(self) -> None:
        """Consume an expiry, so the descriptor is no longer readable."""
        with contextlib.suppress(BlockingIOError):
            os.read(self._fd, 8)

    def close(self) -> None:
        os.close(self._fd)
