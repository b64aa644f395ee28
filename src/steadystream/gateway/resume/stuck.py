"""The stuck-reader cut of a resumed reader's replay (docs/gateway.md#resume).

A reader who came back is cut as the relay cuts its client: when it drains nothing for
``limits.stuck_timeout`` while a write is pending (gateway/buffer.py's :class:`StuckClient`,
told what the client's connection holds unsent), never while it reads, however slowly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from steadystream._clock import Clock
from steadystream.gateway.buffer import StuckClient

__all__ = ["StuckReader"]


class StuckReader:
    """Cuts a reader who drains nothing for ``limits.stuck_timeout`` while a write of its
    replay is pending, as the relay cuts its client (gateway/buffer.py's
    :class:`StuckClient`): a reader who reads, however slowly, is not cut. The whole
    response counts, its last write too, and the kept events a replay begins with are
    handed to the server in one write: a wait per write would see neither."""

    def __init__(self, clock: Clock, timeout_ns: int, unsent: Callable[[], int | None]) -> None:
        self.clock = clock
        self.stuck = StuckClient(timeout_ns)
        self.unsent = unsent
        self.cut = False
        self._task: asyncio.Task[None] | None = None

    def watch(self) -> None:
        """Watch the writes of the task that calls this; cancel it when its reader is stuck."""
        worker = asyncio.current_task()
        assert worker is not None
        self._task = asyncio.ensure_future(self._watch(worker))

    def sending(self) -> None:
        self.stuck.sending(self.clock.now_ns())

    def sent(self) -> None:
        self.stuck.sent()

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _watch(self, worker: asyncio.Task[object]) -> None:
        clock, stuck = self.clock, self.stuck
        while True:
            now = clock.now_ns()
            stuck.observe(now, self.unsent())
            if stuck.stuck(now):
                self.cut = True
                worker.cancel()  # (run_until_disconnect takes it for finished)
                return
            await clock.sleep_until(stuck.next_check(now))
