"""The writer's side of a request: planned events out of the scheduler, write times back in.

The scheduler pushes :class:`PlannedEvent` s (and finally an ending) into a handle; whoever
writes the response (the HTTP app, or a test with no sockets) asks :meth:`next_write` for
the events due together, writes them, and reports the write with :meth:`mark_written`, which
fills in the ground truth. The handle waits on the injected clock, so tests run it in
simulated time.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from steadystream._clock import Clock
from steadystream._types import EventKind
from steadystream.lab.causes import Extras, labels
from steadystream.lab.emission import PlannedEvent
from steadystream.lab.faults import FaultSpec
from steadystream.lab.truth import RequestTruth

__all__ = ["Ending", "StreamHandle", "StreamOwner"]


class Ending(enum.StrEnum):
    """How the lab ends a stream."""

    STOP = "stop"
    LENGTH = "length"
    ERROR = "error"  # an in-band error event (fault)
    RESET = "reset"  # the connection is reset (fault)
    CANCELLED = "cancelled"  # the client went away
    SHUTDOWN = "shutdown"  # the lab is stopping


class StreamOwner(Protocol):
    """What a handle tells the engine that made it (the engine, or a test's stand-in)."""

    def cancel(self, handle: StreamHandle) -> None: ...

    def request_progress(self, handle: StreamHandle) -> None: ...


class StreamHandle:
    """One request's stream, between the scheduler and the writer."""

    __slots__ = (
        "_clock",
        "_ending",
        "_ending_at",
        "_label_min_ns",
        "_last_planned",
        "_outbox",
        "_owner",
        "_waiter",
        "faults",
        "pieces",
        "truth",
    )

    def __init__(
        self,
        owner: StreamOwner,
        truth: RequestTruth,
        pieces: list[str],
        clock: Clock,
        label_min_ns: int,
        faults: FaultSpec | None = None,
    ) -> None:
        self._owner = owner
        self._clock = clock
        self._label_min_ns = label_min_ns
        self._outbox: deque[PlannedEvent] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ending: Ending | None = None
        self._ending_at = 0
        self._last_planned = 0
        self.truth = truth
        self.pieces = pieces
        self.faults = faults if faults is not None else FaultSpec()  # the writer's share

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def request_id(self) -> str:
        return self.truth.request_id

    @property
    def ending(self) -> Ending | None:
        """Why the stream ends, once every event planned before the end has been taken."""
        if self._outbox or self._ending is None or self._ending_at > self._clock.now_ns():
            return None
        return self._ending

    # -- the scheduler's side -----------------------------------------------------------------

    def push(self, events: list[PlannedEvent]) -> None:
        self._outbox.extend(events)
        self._last_planned = events[-1].planned_ns
        self._wake()

    def end(self, ending: Ending, at_ns: int) -> None:
        """No more events after those pushed; the end goes out with the last of them."""
        if self._ending is None:
            self._ending = ending
            self._ending_at = max(at_ns, self._last_planned)
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the writer's side --------------------------------------------------------------------

    async def next_write(self) -> list[PlannedEvent] | None:
        """The events to write together now, waiting until they are due.

        None once the stream has ended; :attr:`ending` then says how. After the last events
        :attr:`ending` is already set, so the writer can send the end in the same write.
        """
        clock = self._clock
        while True:
            outbox = self._outbox
            if outbox:
                due = outbox[0].planned_ns
                if due > clock.now_ns():
                    await clock.sleep_until(due)
                now = clock.now_ns()
                batch = [outbox.popleft()]
                while outbox and outbox[0].planned_ns <= now:
                    batch.append(outbox.popleft())
                return batch
            if self._ending is not None:
                if self._ending_at > clock.now_ns():
                    await clock.sleep_until(self._ending_at)
                    continue
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def text_of(self, event: PlannedEvent) -> str:
        return "".join(self.pieces[event.first_token : event.first_token + event.tokens])

    def mark_written(
        self,
        events: Sequence[PlannedEvent],
        written_ns: int,
        wire_bytes: Sequence[int],
        texts: Sequence[str],
    ) -> None:
        """Record that ``events`` were written at ``written_ns`` (ground truth)."""
        truth = self.truth
        label_min = self._label_min_ns
        for event, wire, text in zip(events, wire_bytes, texts, strict=True):
            extras = event.extras
            truth.add_event(
                EventKind.CONTENT,
                event.planned_ns,
                written_ns,
                event.tokens,
                wire,
                text,
                labels(extras, label_min) if extras else (),
                {cause.value: ns for cause, ns in extras.items() if ns > 0} if extras else None,
            )

    def mark_other(
        self,
        kind: EventKind,
        written_ns: int,
        wire_bytes: int,
        planned_ns: int | None = None,
        extras: Extras | None = None,
    ) -> None:
        """Record a non-content event (role, finish, usage, error) written at ``written_ns``.

        ``extras``: the delay the gap ending at it carries, by cause (a silence after the
        finish, asked for by a fault).
        """
        planned = written_ns if planned_ns is None else planned_ns
        if not extras:
            self.truth.add_event(kind, planned, written_ns, 0, wire_bytes)
            return
        named = labels(extras, self._label_min_ns)
        delays = {cause.value: ns for cause, ns in extras.items() if ns > 0}
        self.truth.add_event(kind, planned, written_ns, 0, wire_bytes, "", named, delays)

    def finish(self, written_ns: int, reason: str | None = None) -> None:
        """The writer is done: the stream ended (or the client left) at ``written_ns``."""
        truth = self.truth
        if truth.stream_done:
            return
        truth.end_ns = written_ns
        if reason is not None:
            truth.finish_reason = reason
        elif truth.finish_reason is None and self._ending is not None:
            truth.finish_reason = self._ending.value
        truth.stream_done = True
        self._owner.request_progress(self)

    def cancel(self) -> None:
        """The client went away: tell the scheduler (it frees the KV at the next step)."""
        self._owner.cancel(self)
