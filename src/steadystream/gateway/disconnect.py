"""Race a response against the client's disconnect (as Starlette's ``StreamingResponse`` does).

The response's work and a listener for ``http.disconnect`` run side by side; whichever ends
first ends the other. When the client goes first, the work is cancelled and awaited, so its
``finally`` (which closes the upstream response explicitly) has run when this returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.types import Receive

from steadystream._clock import Clock

__all__ = ["run_until_disconnect"]


async def run_until_disconnect(
    work: Coroutine[Any, Any, None],
    receive: Receive,
    clock: Clock,
    *,
    answered: Callable[[], bool],
    detach: Callable[[], bool] | None = None,
) -> int | None:
    """Run ``work``; return None when it finished, or the instant the client was seen to leave.

    ``answered()`` tells whether the whole response has been sent: servers report
    ``http.disconnect`` once it has, and that is no client leaving. An exception from
    ``work`` propagates. A task cancelled by ``work`` itself (a stuck client cut) counts as
    finished.

    ``detach()``, asked when the client leaves first: True lets ``work`` run on without its
    client (a resumable stream, gateway/resume; it ends itself, or its owner cancels it),
    and this waits for it; the instant it is seen cancelled is returned then.
    """
    main = asyncio.ensure_future(work)
    listener = asyncio.ensure_future(_wait_for_disconnect(receive))
    noticed: int | None = None
    try:
        done, _ = await asyncio.wait({main, listener}, return_when=asyncio.FIRST_COMPLETED)
        if main not in done:
            if answered():
                await asyncio.wait({main})
            elif detach is not None and detach():
                await asyncio.wait({main})
                if main.cancelled():
                    noticed = clock.now_ns()
            else:
                noticed = clock.now_ns()
                main.cancel()
                await asyncio.wait({main})
    finally:
        for task in (main, listener):
            if not task.done():
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        if not main.done():
            with contextlib.suppress(asyncio.CancelledError):
                await main
    if noticed is None and not main.cancelled():
        main.result()  # re-raise what the work raised
    return noticed


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
