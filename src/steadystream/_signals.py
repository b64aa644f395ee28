"""A signal's handler for the length of a ``with`` block."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["handling"]

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@contextlib.contextmanager
def handling(signum: signal.Signals, handler: Handler) -> Iterator[None]:
    """Handle ``signum`` with ``handler`` inside the block, and give the old handler back.

    Off the main thread (a test's runner, say) signals are not this code's to take: the
    block runs with the handlers as they are.
    """
    try:
        previous = signal.signal(signum, handler)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signum, previous)
