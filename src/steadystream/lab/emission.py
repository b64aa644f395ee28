"""Emission: how the tokens a sequence generates become events, and when each is released.

Two stages sit between the scheduler and the connection:

- grouping: an event goes out once it holds ``tokens_per_event`` tokens (1 is "chunking
  smaller"; more is coalesced); everything a step made that is pending goes in one event;
- head burst: the first ``head_burst_tokens`` are held and released at once, then events
  are paced at least ``tail_interval`` per token (the slower tail).

Then the :class:`~steadystream.lab.network.ConnectionModel` plans the write. Changes these
stages make to a gap are charged to ``head-burst`` (or absorbed; see
:mod:`steadystream.lab.causes`). Grouping is the stream's cadence, not a pause: it is not
labelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from steadystream.lab.causes import Cause, Extras, stage_change
from steadystream.lab.network import ConnectionModel
from steadystream.lab.scenario import EmissionParams

__all__ = ["Emitter", "PlannedEvent"]


@dataclass(slots=True, eq=False)
class PlannedEvent:
    """One content event as the lab plans it. Times are absolute clock ns."""

    first_token: int  # index of its first token in the answer
    tokens: int
    ready_ns: int  # when the scheduler finished its last token
    planned_ns: int  # when it is meant to be written
    extras: Extras  # delay beyond plain decoding in the gap before it, per cause


class Emitter:
    """Turns one sequence's generated tokens into planned events, in order."""

    __slots__ = (
        "_connection",
        "_head_left",
        "_held",
        "_last_release",
        "_next_token",
        "_pending",
        "_pending_extras",
        "_per_event",
        "_prev_hold",
        "_tail_ns",
    )

    def __init__(self, params: EmissionParams, connection: ConnectionModel) -> None:
        self._per_event = params.tokens_per_event
        self._head_left = params.head_burst_tokens
        self._tail_ns = round(params.tail_interval_ms * 1_000_000)
        self._connection = connection
        self._pending = 0
        self._pending_extras: Extras = {}
        self._next_token = 0
        self._held: list[PlannedEvent] = []
        self._last_release: int | None = None
        self._prev_hold = 0

    def feed(
        self, ready_ns: int, tokens: int, extras: Extras | None, final: bool
    ) -> list[PlannedEvent]:
        """Take ``tokens`` finished at ``ready_ns``; return the events now planned."""
        if extras:
            pending_extras = self._pending_extras
            for cause, ns in extras.items():
                pending_extras[cause] = pending_extras.get(cause, 0) + ns
        self._pending += tokens
        if self._pending == 0 or (self._pending < self._per_event and not final):
            return self._release_held(ready_ns) if final and self._held else []
        event = PlannedEvent(self._next_token, self._pending, ready_ns, 0, self._pending_extras)
        self._next_token += self._pending
        self._pending = 0
        self._pending_extras = {}
        if self._head_left > 0:
            self._held.append(event)
            self._head_left -= event.tokens
            if self._head_left > 0 and not final:
                return []
            return self._release_held(ready_ns)
        if self._tail_ns and self._last_release is not None:
            release = max(ready_ns, self._last_release + self._tail_ns * event.tokens)
        else:
            release = ready_ns
        self._release(event, release)
        return [event]

    def _release_held(self, release_ns: int) -> list[PlannedEvent]:
        held, self._held = self._held, []
        self._head_left = 0
        for event in held:
            self._release(event, release_ns)
        return held

    def _release(self, event: PlannedEvent, release_ns: int) -> None:
        hold = release_ns - event.ready_ns
        if hold != self._prev_hold:
            stage_change(event.extras, Cause.HEAD_BURST, hold - self._prev_hold)
            self._prev_hold = hold
        self._last_release = release_ns
        event.planned_ns = self._connection.plan_write(release_ns, event.extras)
