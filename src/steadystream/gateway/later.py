"""Work the express lane leaves for after the loop's pass over the reads that woke it.

One engine step makes many upstreams readable at once, and the loop runs all their read
callbacks in one pass. The express lane (:func:`~steadystream.gateway.attempt.express_lane`)
writes each read to its client there, and leaves what only the gateway needs (the records,
the watchdog, the failover progress) here: it runs in one callback after that pass, in the
order the reads came, so that no client waits for another stream's bookkeeping. Anything
that reads what the bookkeeping writes runs :meth:`AfterWrites.run` first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["AfterWrites"]

log = logging.getLogger("steadystream.gateway")


class AfterWrites:
    """A FIFO of calls, run by one loop callback scheduled when the first one is added."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, call: Callable[..., None], *args: Any) -> None:
        """Run ``call(*args)`` after the loop's current pass (or at the next :meth:`run`)."""
        if not self._calls:
            asyncio.get_running_loop().call_soon(self.run)
        self._calls.append((call, args))

    def run(self) -> None:
        """Run every call added so far, in order (a failing one is logged, not the rest lost)."""
        while calls := self._calls:
            self._calls = []
            for call, args in calls:
                try:
                    call(*args)
                except Exception:
                    log.exception("the gateway's bookkeeping after a write failed")
