"""Which stamps a stream gets: the kernel's receive stamps, or the clock read in user space."""

from __future__ import annotations

import enum

from steadystream._exceptions import SpecError
from steadystream.stamped.kernel import kernel_stamps_available

__all__ = ["STAMP_CHOICES", "StampMode", "resolve_stamps"]

STAMP_CHOICES = ("auto", "kernel", "user")


class StampMode(enum.StrEnum):
    """What ``meta.stamps`` says about a stream's times (docs/bench.md)."""

    KERNEL = "kernel"  # when the packet reached the socket (recvmsg, SO_TIMESTAMPNS)
    USER = "user"  # when the event loop got to the bytes


def resolve_stamps(requested: str) -> StampMode:
    """``auto``: kernel stamps where the platform gives them, user stamps otherwise."""
    if requested not in STAMP_CHOICES:
        raise SpecError(f"stamps: {requested!r} is not one of {', '.join(STAMP_CHOICES)}")
    if requested == "user":
        return StampMode.USER
    if kernel_stamps_available():
        return StampMode.KERNEL
    if requested == "kernel":
        raise SpecError(
            "stamps: 'kernel' asked for, but this platform gives no kernel receive stamps on "
            "TCP (Linux only; some sandboxes drop them); use 'auto' or 'user'"
        )
    return StampMode.USER
