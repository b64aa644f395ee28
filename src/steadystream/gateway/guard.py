"""The timers of one stream, in one task: watchdog deadlines, keepalives, the stuck-client cut.

The decisions are pure (:class:`~steadystream.gateway.watchdog.Watchdog`,
:class:`~steadystream.gateway.buffer.StuckClient`); this loop only sleeps on the injected
clock until the earliest thing due and acts on it. It costs nothing per event: the watchdog's
deadline moves on every token, and the guard just finds a later deadline when it wakes. A new
upstream attempt or a resumed read pokes it, since either may bring a deadline forward.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from steadystream._types import EventKind, Outcome
from steadystream._units import format_duration
from steadystream.gateway.events import KEEPALIVE, Failure, Piece
from steadystream.gateway.failover import Cause
from steadystream.gateway.state import labels_of
from steadystream.gateway.watchdog import StallKind
from steadystream.gateway.writers import Out

if TYPE_CHECKING:
    from steadystream.gateway.attempt import Attempt
    from steadystream.gateway.relay import StreamRelay

__all__ = ["Guard"]

_KEEPALIVE_OUT = Out(KEEPALIVE, [Piece(EventKind.KEEPALIVE, "", KEEPALIVE, len(KEEPALIVE))])


class Guard:
    """Runs as one task beside a stream's reader and writer."""

    __slots__ = ("_poke", "relay")

    def __init__(self, relay: StreamRelay) -> None:
        self.relay = relay
        self._poke: asyncio.Future[None] | None = None

    def poke(self) -> None:
        """Look at the deadlines again now."""
        poke = self._poke
        if poke is not None and not poke.done():
            poke.set_result(None)

    async def run(self) -> None:
        relay = self.relay
        clock = relay.clock
        stuck = relay.stuck
        progress = relay.progress
        interval = relay.state.config.limits.keepalive_interval
        next_keepalive = clock.now_ns() + interval
        loop = asyncio.get_running_loop()
        while True:
            now = clock.now_ns()
            attempt = relay.current
            wake = stuck.next_check(now)
            if attempt is not None and attempt.task is not None and not attempt.task.done():
                expired = attempt.watchdog.expired(now)
                watchdog = attempt.watchdog
                if expired is not None and not watchdog.waived and relay.waits_out_stall():
                    self._count_stall(attempt, expired)
                    watchdog.waive(relay.state.config.watchdog.give_up_timeout)
                    deadline = watchdog.deadline()
                    if deadline is not None:
                        wake = min(wake, deadline)
                elif expired is not None:
                    self._stall(attempt, expired)
                else:
                    deadline = attempt.watchdog.deadline()
                    if deadline is not None:
                        wake = min(wake, deadline)
            if stuck.stuck(now):
                self._cut_stuck()
                return
            if not progress.first_token:
                outlet = relay.outlet
                if now >= next_keepalive and (outlet is None or not outlet.busy):
                    relay.buffer.offer(_KEEPALIVE_OUT, len(KEEPALIVE))
                    next_keepalive = now + interval
                wake = min(wake, next_keepalive)
            self._poke = loop.create_future()
            sleeper = asyncio.ensure_future(clock.sleep_until(wake))
            try:
                await asyncio.wait({sleeper, self._poke}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                self._poke = None

    def _stall(self, attempt: Attempt, kind: StallKind) -> None:
        """Stop the reader of a stalled attempt; the relay decides what follows."""
        watchdog = attempt.watchdog
        if kind is StallKind.FIRST_TOKEN:
            cause = Cause.FIRST_TOKEN_TIMEOUT
            message = f"no first token within {format_duration(watchdog.first_token_ns)}"
        elif watchdog.waived:
            cause = Cause.STALL
            give_up = self.relay.state.config.watchdog.give_up_timeout
            message = f"no token for {format_duration(give_up)}, waited out with no fallback"
        else:
            cause = Cause.STALL
            message = f"no token for {format_duration(watchdog.stall_ns)}"
        attempt.failure = Failure(cause, message)
        if not watchdog.waived:  # a silence waited out was counted when it began
            self._count_stall(attempt, kind)
        assert attempt.task is not None
        attempt.task.cancel()

    def _count_stall(self, attempt: Attempt, kind: StallKind) -> None:
        relay = self.relay
        labels = labels_of(relay.record)
        relay.state.metrics.stalls.labels(*labels[:3], attempt.upstream.name, kind.value).inc()

    def _cut_stuck(self) -> None:
        relay = self.relay
        record = relay.record
        record.outcome = Outcome.CLIENT_STUCK
        record.error = f"the client read nothing for {format_duration(relay.stuck.timeout_ns)}"
        relay.state.log.warning("request %s: %s; cut", record.request_id, record.error)
        relay.cancel()
