"""The pacer: a release policy with no clock and no I/O, driven live or in simulation.

A pacer is told when events arrive (:meth:`Pacer.push`) and when time has come
(:meth:`Pacer.ready`); it answers with the events to release now and with the time it next
wants to be woken (:meth:`Pacer.next_due`). It never reads a clock and never sleeps, so the
same object runs under the live driver (:func:`steadystream.shaping.pace`) and under the
discrete-event simulation (:func:`steadystream.shaping.simulate`), and both give the same
release times.

Rules every pacer follows (the drivers rely on them):

- Tokens leave in arrival order; text and token counts are kept (see ``_pieces`` for how a
  chunk is cut when its tokens leave at different times). Only events that carry text the
  user sees (content, reasoning, tool call, with tokens) are paced; the others (role, usage,
  keepalive, empty, error) leave as soon as everything before them has left.
- At one instant the policy is settled before and after each arrival, so the releases at an
  instant do not depend on the order in which a driver interleaves arrivals and wake-ups.
- After :meth:`Pacer.close` (end of input) the held tokens drain one by one at
  ``min(step, tail / held)``, where ``step`` is the policy's own spacing: the last one leaves
  at most ``tail`` (default 300 ms) after the close. Tokens due less than
  :data:`DRAIN_GRAIN_NS` (1 ms) apart leave together, one release per millisecond.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

from steadystream._clock import NS_PER_MS
from steadystream._exceptions import SpecError
from steadystream._types import TEXT_KINDS, Event, Nanos
from steadystream.shaping._pieces import Item, merge_paced

__all__ = [
    "DEFAULT_HIGH_WATERMARK",
    "DEFAULT_LOW_WATERMARK",
    "DEFAULT_TAIL_NS",
    "DRAIN_GRAIN_NS",
    "MAX_DURATION_NS",
    "TAIL_PARAM",
    "Pacer",
    "Param",
    "StreamRun",
    "check_count",
    "check_duration",
    "check_rate",
    "check_watermarks",
    "drain_wake",
    "is_paced",
]

DEFAULT_TAIL_NS = 300 * NS_PER_MS
"""Longest time the tokens held at the end of a stream take to drain."""

DEFAULT_HIGH_WATERMARK = 50
"""Tokens held at which the drivers stop reading from the source."""
DEFAULT_LOW_WATERMARK = 20
"""Tokens held at or below which they read again."""


@dataclass(slots=True)
class StreamRun:
    """A whole recorded stream replayed by a pacer's fast form (see :meth:`Pacer._run_stream`).

    ``group_ends[i]`` is the number of paced tokens released after release ``i``, made at
    ``group_times[i]``; ``max_buffered`` the most tokens held at once.
    """

    group_ends: list[int]
    group_times: list[int]
    max_buffered: int


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a pacer, as a spec names it.

    ``kind`` says how a spec value is read: ``duration`` (``120ms``), ``count`` (an integer),
    ``rate`` (a positive number), ``chars`` (a string of characters) or ``words``
    (``and|but|or``). ``attr`` is the constructor keyword and attribute that holds it.
    """

    name: str
    kind: str
    attr: str
    default: Any
    help: str

    def format(self, value: Any) -> str:
        """``value`` as a spec writes it, so that parsing it gives ``value`` back."""
        if self.kind == "duration":
            return _format_ns(int(value))
        if self.kind == "rate":
            short = f"{value:g}"
            return short if float(short) == value else repr(float(value))
        text = "|".join(value) if self.kind == "words" else str(value)
        if "," in text or text != text.strip() or text.startswith('"'):
            return '"' + text.replace('"', '""') + '"'
        return text


def _format_ns(ns: int) -> str:
    # The largest unit that writes it exactly: 33ms, not 0.033s nor 33000000ns.
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)):
        if ns and ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns}ns"


TAIL_PARAM = Param(
    "tail",
    "duration",
    "tail_ns",
    DEFAULT_TAIL_NS,
    "longest drain of the tokens still held when the stream ends",
)


DRAIN_GRAIN_NS = NS_PER_MS
"""Tokens of the tail drain due less than this apart leave together, at this spacing: no
screen shows more than a thousand updates a second, and a drain of many tokens (a recorded
event may claim millions) then takes at most ``tail / 1 ms`` releases, not one per token."""


def drain_wake(now: Nanos, next_due: Nanos, last_due: Nanos, step: int) -> Nanos:
    """When the tail drain releases next, after a release at ``now``: when the next token is
    due, or a :data:`DRAIN_GRAIN_NS` later when tokens are due closer together than that
    (never after the last token is due, so the drain still ends within ``tail``)."""
    if step >= DRAIN_GRAIN_NS:
        return next_due
    return min(max(next_due, now + DRAIN_GRAIN_NS), last_due)


MAX_DURATION_NS = 2**62
"""The longest duration a pacer takes (about 146 years): a recorded instant plus it still
fits the 64-bit nanoseconds that release times are held in."""


def check_duration(pacer: str, name: str, value: int, *, allow_zero: bool = False) -> int:
    """A whole number of nanoseconds, positive (or zero when allowed), at most
    :data:`MAX_DURATION_NS`."""
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        need = "zero or more" if allow_zero else "more than zero"
        raise SpecError(f"{pacer}: {name} must be a duration {need} (like 120ms), got {value!r}")
    if value > MAX_DURATION_NS:
        raise SpecError(
            f"{pacer}: {name} must be a duration of at most about 146 years (2**62 ns),"
            f" got {value!r}ns"
        )
    return value


def check_count(pacer: str, name: str, value: int, *, minimum: int) -> int:
    """An integer of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{pacer}: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_rate(
    pacer: str,
    name: str,
    value: float,
    *,
    upper: float | None = None,
    lower: float = 0.0,
) -> float:
    """A finite number above zero (at least ``lower`` when given, and at most ``upper``)."""
    number = math.nan
    if not isinstance(value, bool) and isinstance(value, int | float):
        try:
            number = float(value)  # an int past the float range overflows: refused below
        except OverflowError:
            number = math.nan
    ok = (
        math.isfinite(number)
        and number > 0
        and number >= lower
        and (upper is None or number <= upper)
    )
    if not ok:
        low = f"above 0 (at least {lower:g})" if lower > 0 else "above 0"
        bound = f" and at most {upper:g}" if upper is not None else ""
        raise SpecError(f"{pacer}: {name} must be a number {low}{bound}, got {value!r}")
    return number


def check_watermarks(pacer: Pacer, high: int | None, low: int) -> None:
    """Backpressure bounds that make sense, and that ``pacer`` cannot deadlock against."""
    if high is None:
        return
    if isinstance(high, bool) or not isinstance(high, int) or high < 1:
        raise SpecError(f"high_watermark must be an integer >= 1, got {high!r}")
    if isinstance(low, bool) or not isinstance(low, int) or not 0 <= low < high:
        raise SpecError(f"low_watermark must be an integer from 0 to {high - 1}, got {low!r}")
    if pacer.max_unscheduled > low:
        # It could hold more than `low` tokens waiting for input that a paused read never brings.
        raise SpecError(
            f"{pacer.name}: may hold {pacer.max_unscheduled} tokens until more arrive, above "
            f"low_watermark={low}; raise low_watermark or lower the pacer's cap"
        )


def is_paced(event: Event) -> bool:
    """True for events the pacer holds back: text the user sees, with tokens."""
    return event.tokens > 0 and event.kind in TEXT_KINDS


class Pacer(ABC):
    """Base of every pacer: the event queue, the tail drain and the driver-facing methods.

    A subclass supplies the policy: :meth:`_release_count` (how many held tokens leave at an
    instant), :meth:`_wake_at` (when that could next be more than zero), :meth:`_arrived`
    (bookkeeping on each paced arrival), :meth:`_step` (its natural spacing, used by the
    tail drain) and, optionally, :meth:`_run_stream` (a faster form for the simulation).
    ``_release_count`` must release nothing more when called again at the same instant, and
    ``_wake_at`` must never name a time at which it would release nothing: the drivers sleep
    until then.

    A pacer paces one stream; :meth:`fresh` makes a new one with the same settings.
    """

    name: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    coalesce: ClassVar[bool] = False
    """Merge the pieces released together (same instant, same kind) into one event."""
    max_unscheduled: int = 0
    """Most tokens the policy may hold with nothing due until more input arrives."""

    def __init__(self, *, tail_ns: int = DEFAULT_TAIL_NS) -> None:
        self.tail_ns = check_duration(self.name, "tail", tail_ns, allow_zero=True)
        self._held: deque[list[int]] = deque()  # [arrival_ns, tokens left] per paced event
        self._held_tokens = 0
        self._last_release: int | None = None
        self._closed = False
        self._used = False  # pushed to or closed: it has paced (part of) a stream
        self._draining = False
        self._drain_step = 0
        self._drain_next = 0  # when the next token is due
        self._drain_wake = 0  # when the next release happens (at or after that)
        self._drain_last = 0  # when the last token is due
        self._items: deque[Item] = deque()
        self._outbox: list[Event] = []
        self._outbox_tokens = 0

    # -- the driver-facing API --------------------------------------------------------------

    def push(self, now: Nanos, event: Event) -> None:
        """An event arrived at ``now``."""
        if self._closed:
            raise RuntimeError(f"{self.name}: push after close")
        self._used = True
        self._emit(now, self._settle(now))
        paced = is_paced(event)
        self._items.append(Item(event, paced))
        if paced:
            self._admit(now, event.tokens, event.text)
        self._emit(now, self._settle(now))

    def ready(self, now: Nanos) -> list[Event]:
        """The events to release at ``now``, stamped with the instant the policy let them go."""
        self._emit(now, self._settle(now))
        out = self._outbox
        self._outbox = []
        self._outbox_tokens = 0
        return out

    def next_due(self, now: Nanos) -> Nanos | None:
        """When to call :meth:`ready` next if nothing arrives; None: only on new input."""
        if self._outbox:
            return now
        if not self._held_tokens:
            return None
        if self._draining:
            return self._drain_wake
        return self._wake_at(now)

    def close(self, now: Nanos) -> None:
        """No more input: start draining what is held (see the module docstring)."""
        if self._closed:
            return
        self._used = True
        self._emit(now, self._settle(now))
        self._start_drain(now)
        self._emit(now, self._settle(now))

    @property
    def waiting(self) -> int:
        """Released events not yet taken by the consumer (events without tokens count)."""
        return len(self._outbox)

    @property
    def buffered(self) -> int:
        """Tokens held: not yet handed out by :meth:`ready`."""
        return self._held_tokens + self._outbox_tokens

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def used(self) -> bool:
        """Whether it has paced (part of) a stream: an event pushed, or closed. A pacer paces
        one stream; :meth:`fresh` makes another."""
        return self._used

    @property
    def done(self) -> bool:
        """Closed, and every event has been handed out."""
        return self._closed and not self._items and not self._outbox

    def settings(self) -> dict[str, Any]:
        """The constructor keywords that make an identical pacer."""
        return {param.attr: getattr(self, param.attr) for param in self.params}

    def fresh(self) -> Pacer:
        """A new pacer with the same settings and no state."""
        return type(self)(**self.settings())

    def spec(self, *, full: bool = False) -> str:
        """The spec that makes this pacer (``leaky:interval=33ms``); ``parse_spec`` reads it back.

        Only the settings that differ from the defaults are written, or all with ``full``.
        """
        settings = self.settings()
        parts = [
            f"{param.name}={param.format(settings[param.attr])}"
            for param in self.params
            if full or settings[param.attr] != param.default
        ]
        return f"{self.name}:{','.join(parts)}" if parts else self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec()}>"

    # -- the policy (subclasses) ------------------------------------------------------------

    @abstractmethod
    def _release_count(self, now: Nanos) -> int:
        """Held tokens to release at ``now`` (0 .. held); called only when something is held."""

    @abstractmethod
    def _wake_at(self, now: Nanos) -> Nanos | None:
        """When :meth:`_release_count` could next return more than zero without new input."""

    def _arrived(self, now: Nanos, tokens: int, text: str) -> None:  # noqa: B027
        """Bookkeeping for a paced arrival (already counted in the held queue)."""

    def _step(self) -> int:
        """The policy's own spacing between releases; 0 releases everything at the close."""
        return 0

    def _run_stream(
        self,
        arrivals: list[int],
        sizes: list[int],
        texts: list[str] | None,
        high: int | None,
        low: int,
    ) -> StreamRun | None:
        """A faster form of the simulation for a whole stream, on a fresh pacer (optional).

        It must release exactly what the generic driver would, and return None (leaving the
        stream to the generic driver, on another fresh pacer) where backpressure would pause
        the read. ``sizes`` holds 0 for unpaced events.
        """
        return None

    # -- the core shared by both drivers (integers only) ------------------------------------

    def _admit(self, now: Nanos, tokens: int, text: str) -> None:
        self._held.append([now, tokens])
        self._held_tokens += tokens
        self._arrived(now, tokens, text)

    def _settle(self, now: Nanos) -> int:
        """Release what is due at ``now``; returns the number of tokens released."""
        held = self._held_tokens
        if not held:
            return 0
        if self._draining:
            if now < self._drain_wake:
                return 0
            step = self._drain_step
            count = held if step == 0 else min(held, (now - self._drain_next) // step + 1)
            self._drain_next += count * step
            self._drain_wake = drain_wake(now, self._drain_next, self._drain_last, step)
        else:
            count = self._release_count(now)
            if not count:
                return 0
        self._held_tokens = held - count
        self._last_release = now
        queue = self._held
        left = count
        while left:
            head = queue[0]
            if head[1] <= left:
                left -= head[1]
                queue.popleft()
            else:
                head[1] -= left
                left = 0
        return count

    def _start_drain(self, now: Nanos) -> None:
        self._closed = True
        self._draining = True
        held = self._held_tokens
        if not held:
            return
        step = min(self._step(), self.tail_ns // held)
        last = self._last_release
        self._drain_step = step
        self._drain_next = self._drain_wake = now if last is None else max(now, last + step)
        self._drain_last = self._drain_next + (held - 1) * step

    def _expired(self, now: Nanos, hold_ns: int) -> int:
        """Held tokens that arrived at least ``hold_ns`` before ``now``."""
        if self._held[0][0] + hold_ns > now:
            return 0
        count = 0
        for arrival, tokens in self._held:
            if arrival + hold_ns > now:
                break
            count += tokens
        return count

    # -- handing events out -----------------------------------------------------------------

    def _emit(self, now: Nanos, count: int) -> None:
        """Move ``count`` paced tokens to the outbox, with the unpaced events that follow."""
        items = self._items
        outbox = self._outbox
        first = len(outbox)
        released = count
        while items:
            item = items[0]
            if not item.paced:
                outbox.append(item.event._replace(time_ns=now))
                items.popleft()
                continue
            if not count:
                break
            take = min(count, item.left)
            outbox.append(item.take(now, take))
            count -= take
            if not item.left:
                items.popleft()
        self._outbox_tokens += released
        if self.coalesce and len(outbox) - first > 1:
            outbox[first:] = merge_paced(outbox[first:])
