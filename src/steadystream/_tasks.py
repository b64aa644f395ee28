"""Ending a background task: cancel it, and wait until it has really ended.

``task.cancel()`` only asks; until the task has run its ``finally`` blocks, what it holds
(a socket, a live display, a timer) is still held. Every owner of a background task ends
it the same way, here.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to do) and wait for it to end.

    Its cancellation is expected and swallowed; anything else it raised is raised here, so
    a background task that crashed does not go unnoticed. A cancellation of the caller itself
    while it waits is not the task's: it propagates, as ``asyncio.timeout`` needs it to.
    """
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        caller = asyncio.current_task()
        if caller is not None and caller.cancelling():
            raise
