"""Run a coroutine on uvloop when it is installed (the ``fast`` extra), else on asyncio.

uvloop's lower per-callback cost is client overhead the measurement does not carry: each
chunk is stamped when the loop gets to it, so a cheaper loop gets to it sooner. Whatever drives a
run from synchronous code (the ``bench`` command, a script) runs it here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_name", "run"]

_T = TypeVar("_T")


def _factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name() -> str:
    return "uvloop" if _factory() is not None else "asyncio"


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` to completion; Ctrl-C cancels it (it may catch that and finish up)."""
    with asyncio.Runner(loop_factory=_factory()) as runner:
        return runner.run(main)
