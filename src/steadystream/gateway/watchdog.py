"""The stall watchdog: first-token and inter-token deadlines, pure and clock-free.

The relay tells the watchdog what happened on the upstream side and when (times are the
caller's clock, in ns); the watchdog answers with its current deadline and, once a deadline
has passed, which one. It never reads a clock and never sleeps, so tests drive it with
plain numbers or a :class:`~steadystream.FakeClock`.

What counts: only upstream events that carry tokens (content, reasoning, tool-call text)
reset the clock. Keepalive comments, role-only and empty chunks do not: a server that pings
while its engine is stuck is still stuck. Writes to the client do not either: a slow client
is the backpressure's business, so while the relay has stopped reading upstream because its
buffer is full, the watchdog is paused and the time does not count.

A finish reason ends the token deadlines but not the watch: ``[DONE]`` (or the close) must
follow within ``finish_ns``. An upstream that says "stop" and then holds the connection open
would otherwise keep the client waiting, and the connection held, until someone's timeout.
"""

from __future__ import annotations

import enum

from steadystream._types import Nanos

__all__ = ["StallKind", "Watchdog"]


class StallKind(enum.StrEnum):
    """Which deadline passed."""

    FIRST_TOKEN = "first-token"  # no token since the request was sent
    INTER_TOKEN = "inter-token"  # a silence between two tokens
    AFTER_FINISH = "after-finish"  # a finish reason, then neither [DONE] nor the close


class Watchdog:
    """Deadlines for one upstream attempt.

    ``start(now)`` when the request is sent; ``token(now)`` for every token-carrying event;
    ``finish(now)`` once the upstream gave a finish reason: only the end of the body is due
    after that, within ``finish_ns``; ``done()`` once it ended (``[DONE]``): nothing is due.
    ``pause(now)``/``resume(now)`` bracket the time the relay is not reading.
    """

    __slots__ = (
        "_deadline",
        "_finished",
        "_paused_at",
        "_seen_token",
        "_waived",
        "finish_ns",
        "first_token_ns",
        "last_token_ns",
        "stall_ns",
    )

    def __init__(
        self, *, first_token_ns: Nanos, stall_ns: Nanos, finish_ns: Nanos = 5_000_000_000
    ) -> None:
        if first_token_ns <= 0 or stall_ns <= 0 or finish_ns <= 0:
            raise ValueError("watchdog timeouts must be positive")
        self.first_token_ns = first_token_ns
        self.stall_ns = stall_ns
        self.finish_ns = finish_ns
        self._deadline: Nanos | None = None
        self._paused_at: Nanos | None = None
        self._seen_token = False
        self._waived = False
        self._finished = False
        self.last_token_ns: Nanos | None = None

    def start(self, now: Nanos) -> None:
        self._deadline = now + self.first_token_ns
        self._seen_token = False
        self._finished = False
        self._paused_at = None

    def token(self, now: Nanos) -> None:
        """An event that carries tokens arrived at ``now``."""
        self._seen_token = True
        self.last_token_ns = now
        if self._deadline is not None and not self._finished:
            self._deadline = now + self.stall_ns
            self._waived = False

    def finish(self, now: Nanos) -> None:
        """The upstream gave a finish reason: the body must end within ``finish_ns``."""
        if self._deadline is None or self._finished:
            return
        self._finished = True
        self._waived = False
        self._deadline = now + self.finish_ns

    def done(self) -> None:
        """The upstream ended its answer (``[DONE]``): no deadline any more."""
        self._deadline = None
        self._waived = False

    @property
    def finished(self) -> bool:
        """A finish reason came: the deadline in force is the end of the body's."""
        return self._finished

    def waive(self, give_up_ns: Nanos) -> None:
        """Let this silence run on, up to ``give_up_ns`` after the last token (there is
        nowhere better to go); the next token re-arms the usual stall deadline."""
        if self._deadline is None or self._finished:
            return
        base = self.last_token_ns if self.last_token_ns is not None else self._deadline
        self._deadline = max(self._deadline, base + give_up_ns)
        self._waived = True

    @property
    def waived(self) -> bool:
        """The silence now running was already let run on once: its next expiry is final."""
        return self._waived

    def pause(self, now: Nanos) -> None:
        """The relay stopped reading upstream (its buffer is full)."""
        if self._paused_at is None:
            self._paused_at = now

    def resume(self, now: Nanos) -> None:
        """Reading resumed: the paused time is added to the deadline."""
        paused = self._paused_at
        if paused is None:
            return
        self._paused_at = None
        if self._deadline is not None:
            self._deadline += max(0, now - paused)

    @property
    def seen_token(self) -> bool:
        return self._seen_token

    @property
    def kind(self) -> StallKind:
        """The deadline now in force."""
        if self._finished:
            return StallKind.AFTER_FINISH
        return StallKind.INTER_TOKEN if self._seen_token else StallKind.FIRST_TOKEN

    def deadline(self) -> Nanos | None:
        """When the watchdog next fires if nothing happens; None while paused or finished."""
        if self._paused_at is not None:
            return None
        return self._deadline

    def expired(self, now: Nanos) -> StallKind | None:
        """Which deadline has passed at ``now``, if any."""
        deadline = self.deadline()
        if deadline is None or now < deadline:
            return None
        return self.kind
