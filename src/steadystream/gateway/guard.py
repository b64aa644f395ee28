"""The timers of one stream, in one task: watchdog deadlines, keepalives, the stuck-client cut.

The decisions are pure (:class:`~steadystream.gateway.watchdog.Watchdog`,
:class:`~steadystream.gateway.buffer.StuckClient`); this loop only sleeps on the injected
clock until the earliest thing due and acts on it through the :class:`GuardHooks` it was
given. It never sees the relay (STYLE.md 13), so the real loop runs in tests on a
:class:`~steadystream.FakeClock` with hooks that record what it did.

It costs nothing per event: the watchdog's deadline moves on every token, and the guard just
finds a later deadline when it wakes. A new upstream attempt, a first token, a finish reason
or a resumed read pokes it, since each may bring a deadline forward.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from steadystream._clock import Clock
from steadystream._types import Nanos
from steadystream._units import format_duration
from steadystream.gateway.buffer import StuckClient
from steadystream.gateway.events import Failure
from steadystream.gateway.failover import Cause
from steadystream.gateway.watchdog import StallKind, Watchdog

__all__ = ["Guard", "GuardHooks"]


@dataclass(frozen=True, slots=True)
class GuardHooks:
    """How the guard sees a stream and acts on it."""

    watchdog: Callable[[], Watchdog | None]
    """The watchdog of the upstream read now running (None: no read to watch)."""
    first_token: Callable[[], bool]
    """Whether a token was committed (keepalives stop then)."""
    keepalive: Callable[[], None]
    """Send an SSE keepalive comment, if nothing else is on its way to the client."""
    waits_out_stall: Callable[[], bool]
    """Whether a mid-stream stall is waited out (no fallback) rather than failed over."""
    stop_read: Callable[[Failure], None]
    """Stop the running upstream read for this reason; the relay decides what follows."""
    count_stall: Callable[[StallKind], None]
    """Count a watchdog timeout (the stalls metric)."""
    cut_client: Callable[[str], None]
    """Cut a client that drained nothing, with the reason."""
    unsent: Callable[[], int | None]
    """Bytes the client's connection holds unsent (None: not known)."""


class Guard:
    """Runs as one task beside a stream's reader and writer."""

    __slots__ = ("_clock", "_give_up_ns", "_hooks", "_keepalive_ns", "_poke", "_stuck")

    def __init__(
        self,
        clock: Clock,
        stuck: StuckClient,
        hooks: GuardHooks,
        *,
        keepalive_ns: Nanos,
        give_up_ns: Nanos,
    ) -> None:
        self._clock = clock
        self._stuck = stuck
        self._hooks: GuardHooks | None = hooks
        self._keepalive_ns = keepalive_ns
        self._give_up_ns = give_up_ns
        self._poke: asyncio.Future[None] | None = None

    def poke(self) -> None:
        """Look at the deadlines again now."""
        poke = self._poke
        if poke is not None and not poke.done():
            poke.set_result(None)

    def release(self) -> None:
        """Let go of the hooks once the stream is over: they lead back to the relay, which
        holds this guard, and the cycle would wait for the garbage collector."""
        self._hooks = None

    async def run(self) -> None:
        clock, hooks, stuck = self._clock, self._hooks, self._stuck
        if hooks is None:
            return
        next_keepalive = clock.now_ns() + self._keepalive_ns
        loop = asyncio.get_running_loop()
        while True:
            now = clock.now_ns()
            wake = stuck.next_check(now)
            watchdog = hooks.watchdog()
            if watchdog is not None:
                deadline = self._watch(hooks, watchdog, now)
                if deadline is not None:
                    wake = min(wake, deadline)
            stuck.observe(now, hooks.unsent())
            if stuck.stuck(now):
                timeout = format_duration(stuck.timeout_ns)
                hooks.cut_client(f"the client read nothing for {timeout}")
                return
            if not hooks.first_token():
                if now >= next_keepalive:
                    hooks.keepalive()
                    next_keepalive = now + self._keepalive_ns
                wake = min(wake, next_keepalive)
            # One future, resolved by the clock at ``wake`` or by a poke, whichever is first:
            # no task per wait (a guard waits a few times in every stream's life).
            self._poke = poke = loop.create_future()
            cancel = clock.wake_at(wake, poke)
            try:
                await poke
            finally:
                cancel()
                self._poke = None

    def _watch(self, hooks: GuardHooks, watchdog: Watchdog, now: Nanos) -> Nanos | None:
        """Act on an expired deadline; the next deadline to wake for (None: none)."""
        expired = watchdog.expired(now)
        if expired is None:
            return watchdog.deadline()
        if expired is StallKind.AFTER_FINISH:
            # The answer is whole; only its end never came. Not a stall: nothing is missing.
            limit = format_duration(watchdog.finish_ns)
            hooks.stop_read(
                Failure(
                    Cause.SILENT_AFTER_FINISH,
                    f"no [DONE] nor end of the body within {limit} of the finish reason",
                )
            )
            return None
        if not watchdog.waived and hooks.waits_out_stall():
            hooks.count_stall(expired)
            watchdog.waive(self._give_up_ns)
            return watchdog.deadline()
        if expired is StallKind.FIRST_TOKEN:
            message = f"no first token within {format_duration(watchdog.first_token_ns)}"
            cause = Cause.FIRST_TOKEN_TIMEOUT
        elif watchdog.waived:
            give_up = format_duration(self._give_up_ns)
            message = f"no token for {give_up}, waited out with no fallback"
            cause = Cause.STALL
        else:
            message = f"no token for {format_duration(watchdog.stall_ns)}"
            cause = Cause.STALL
        if not watchdog.waived:  # a silence waited out was counted when it began
            hooks.count_stall(expired)
        hooks.stop_read(Failure(cause, message))
        return None
