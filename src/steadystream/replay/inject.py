"""Synthetic faults placed into a recorded stream, at chosen positions, reproducibly by seed.

One spec per ``--inject``::

    pause:DURATION@POSITION     DURATION more before the token at POSITION (and all after it)
    stall:DURATION@POSITION     the same, in the lab's word
    stall:forever@POSITION      nothing from POSITION on, until the client leaves (or the
                                replay's stall deadline, after which the stream ends cut off)
    burst:N@POSITION            N tokens from POSITION held and released together
    jitter:DURATION             every event late by a uniform draw in [0, DURATION), order kept
    truncate@POSITION           the stream ends at POSITION: no finish, no [DONE]

    POSITION: start | N% | A-B% | token=N | token=A-B

A percentage is of the stream's tokens (``50%`` of 120 tokens is token 60, counting from 0);
a range is drawn per request from the replay's seed and the request's ordinal, as jitter is,
so the same seed and request order give the same injections. A fault lands on the event that
carries its token; a position past the end never fires (as the lab's faults). Pure: plans in,
plans out, no clock and no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from steadystream._causes import Cause
from steadystream._exceptions import SpecError
from steadystream._units import parse_duration

__all__ = ["MAX_INJECTIONS", "Injection", "Plan", "Position", "inject", "parse_injection"]

Kind = Literal["pause", "stall", "burst", "jitter", "truncate"]
Cut = Literal["stall", "truncate"]

_FORMS = (
    "pause:2s@50%, pause:1.5s@token=40, burst:30@start, jitter:20ms, stall:forever@60%,"
    " truncate@80%"
)
_PERCENT = re.compile(r"^([0-9]*\.?[0-9]+)%$")
_PERCENT_RANGE = re.compile(r"^([0-9]*\.?[0-9]+)-([0-9]*\.?[0-9]+)%$")
_TOKEN = re.compile(r"^token=([0-9]+)(?:-([0-9]+))?$")
_MAX_BURST = 1_000_000
# Bounds that keep every planned instant a 64-bit count of ns (the ground truth's form):
# MAX_INJECTIONS faults of a day each stay far below 2**63 ns.
_MAX_DURATION_NS = 86_400 * 1_000_000_000
_MAX_TOKEN = 1_000_000_000
MAX_INJECTIONS = 10_000


@dataclass(frozen=True, slots=True)
class Position:
    """Where in the stream, as a token index: fixed, or drawn from a range per request."""

    unit: Literal["fraction", "token"]
    low: float
    high: float

    def token(self, total: int, rng: np.random.Generator) -> int:
        if self.unit == "token":
            if self.low == self.high:
                return int(self.low)
            return int(rng.integers(int(self.low), int(self.high) + 1))
        value = self.low if self.low == self.high else float(rng.uniform(self.low, self.high))
        return math.floor(value * total)


@dataclass(frozen=True, slots=True)
class Injection:
    """One parsed spec. ``duration_ns`` is None for ``stall:forever``."""

    spec: str
    kind: Kind
    position: Position | None = None
    duration_ns: int | None = None
    count: int = 0


@dataclass(slots=True)
class Plan:
    """What to write for one request: content events at ns offsets from its arrival.

    ``extra`` is the delay injected into the gap ending at each event, by cause, and
    ``applied`` says what each injection did (its ground truth). Events from ``cut_at`` on
    are never written; ``cut`` says how the stream ends there.
    """

    times: list[int]
    tokens: list[int]
    texts: list[str]
    end_ns: int
    role_ns: int = 0
    extra: list[dict[Cause, int]] = field(default_factory=list)
    cut_at: int | None = None
    cut: Cut | None = None
    applied: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.extra:
            self.extra = [{} for _ in self.times]

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def sent(self) -> int:
        """How many events are written."""
        return len(self.times) if self.cut_at is None else self.cut_at


def parse_injection(spec: str) -> Injection:
    """Parse one spec; a :class:`SpecError` names the part that is wrong and the forms."""
    text = spec.strip()
    where = f"injection {spec!r}"
    if text.startswith("truncate"):
        rest = text[len("truncate") :]
        if not rest.startswith("@"):
            raise SpecError(f"{where}: truncate needs a position (truncate@80%)")
        return Injection(text, "truncate", _position(rest[1:], where))
    name, colon, rest = text.partition(":")
    if not colon:
        raise SpecError(f"{where}: expected KIND:VALUE[@POSITION] (examples: {_FORMS})")
    if name == "jitter":
        if "@" in rest:
            raise SpecError(
                f"{where}: jitter applies to the whole stream; drop '@{rest.partition('@')[2]}'"
            )
        return Injection(text, "jitter", duration_ns=_duration(rest, where, "jitter"))
    if name not in ("pause", "stall", "burst"):
        raise SpecError(
            f"{where}: unknown kind {name!r} (accepted: pause, stall, burst, jitter, truncate)"
        )
    value, at, place = rest.partition("@")
    if not at:
        raise SpecError(f"{where}: {name} needs a position after '@' (e.g. {name}:...@50%)")
    position = _position(place, where)
    if name == "burst":
        if not re.fullmatch(r"[0-9]+", value) or not 1 <= int(value) <= _MAX_BURST:
            raise SpecError(
                f"{where}: burst size {value!r} is not a token count (1 to {_MAX_BURST})"
            )
        return Injection(text, "burst", position, count=int(value))
    if name == "stall" and value == "forever":
        return Injection(text, "stall", position)
    return Injection(text, "pause", position, duration_ns=_duration(value, where, name))


def _duration(text: str, where: str, name: str) -> int:
    try:
        value = parse_duration(text, name=f"{where}: {name} duration")
    except SpecError:
        raise
    if value <= 0:
        raise SpecError(f"{where}: {name} duration {text!r} must be above zero")
    if value > _MAX_DURATION_NS:
        raise SpecError(f"{where}: {name} duration {text!r} is longer than a day (24h)")
    return value


def _position(text: str, where: str) -> Position:
    if text == "start":
        return Position("token", 0, 0)
    if match := _PERCENT.match(text):
        value = float(match.group(1))
        _check_percent(value, text, where)
        return Position("fraction", value / 100, value / 100)
    if match := _PERCENT_RANGE.match(text):
        low, high = float(match.group(1)), float(match.group(2))
        _check_percent(low, text, where)
        _check_percent(high, text, where)
        if low > high:
            raise SpecError(f"{where}: position range {text!r} goes backwards")
        return Position("fraction", low / 100, high / 100)
    if match := _TOKEN.match(text):
        low_token = int(match.group(1))
        high_token = int(match.group(2)) if match.group(2) else low_token
        if low_token > high_token:
            raise SpecError(f"{where}: position range {text!r} goes backwards")
        if high_token > _MAX_TOKEN:
            raise SpecError(f"{where}: position {text!r} is past token {_MAX_TOKEN:,}")
        return Position("token", low_token, high_token)
    raise SpecError(
        f"{where}: cannot read position {text!r} (accepted: start, 50%, 40-60%, token=40,"
        " token=30-50)"
    )


def _check_percent(value: float, text: str, where: str) -> None:
    if not 0 <= value <= 100:
        raise SpecError(f"{where}: position {text!r} is outside 0-100%")


def inject(plan: Plan, injections: Sequence[Injection], rng: np.random.Generator) -> Plan:
    """A new plan with ``injections`` applied in order; every draw comes from ``rng``."""
    out = replace(
        plan,
        times=list(plan.times),
        extra=[dict(e) for e in plan.extra],
        applied=list(plan.applied),
    )
    total = out.total_tokens
    starts = np.concatenate(([0], np.cumsum(out.tokens, dtype=np.int64)))[:-1]
    for injection in injections:
        token = injection.position.token(total, rng) if injection.position else None
        # the event that carries the token; len(times) when the token is past the end
        event = None if token is None else int(np.searchsorted(starts, token, side="right")) - 1
        if event is not None and token is not None and token >= total:
            event = len(out.times)
        record: dict[str, Any] = {"spec": injection.spec, "token": token, "event": event}
        record.update(_apply(out, injection, event, rng))
        out.applied.append(record)
    return out


def _apply(
    plan: Plan, injection: Injection, event: int | None, rng: np.random.Generator
) -> dict[str, Any]:
    times = plan.times
    n = len(times)
    if injection.kind == "jitter":
        assert injection.duration_ns is not None
        draws = rng.uniform(0, injection.duration_ns, size=n)
        previous = 0
        added = 0
        for i in range(n):
            before = times[i] - (times[i - 1] if i else 0)
            times[i] = max(previous, times[i] + round(float(draws[i])))
            change = times[i] - (times[i - 1] if i else 0) - before
            if change > 0:
                _charge(plan, i, Cause.NETWORK_BUFFERING, change)
                added += change
            previous = times[i]
        plan.end_ns = max(plan.end_ns, times[-1] if times else 0)
        return {"fired": n > 0, "added_ns": added}
    assert event is not None
    fired = event < n
    if injection.kind in ("stall", "truncate") and injection.duration_ns is None:
        if not fired:  # (past the end: the whole answer goes out, as for any fault there)
            return {"fired": False, "added_ns": None}
        cut: Cut = "stall" if injection.kind == "stall" else "truncate"
        if plan.cut_at is None or event < plan.cut_at:
            plan.cut_at, plan.cut = event, cut
        return {"fired": True, "added_ns": None}
    if not fired:
        return {"fired": False, "added_ns": 0}
    if injection.kind == "burst":
        last_token = min(plan.total_tokens - 1, _first_token(plan, event) + injection.count - 1)
        last = _event_of(plan, last_token)
        held = times[last] - times[event]
        for i in range(event, last):
            times[i] = times[last]
        if held > 0:
            _charge(plan, event, Cause.HEAD_BURST, held)
        return {"fired": True, "added_ns": held, "last_event": last}
    assert injection.duration_ns is not None
    for i in range(event, n):
        times[i] += injection.duration_ns
    plan.end_ns += injection.duration_ns
    _charge(plan, event, Cause.INJECTED_FAULT, injection.duration_ns)
    return {"fired": True, "added_ns": injection.duration_ns}


def _first_token(plan: Plan, event: int) -> int:
    return sum(plan.tokens[:event])


def _event_of(plan: Plan, token: int) -> int:
    seen = 0
    for i, count in enumerate(plan.tokens):
        seen += count
        if token < seen:
            return i
    return len(plan.tokens) - 1


def _charge(plan: Plan, event: int, cause: Cause, ns: int) -> None:
    plan.extra[event][cause] = plan.extra[event].get(cause, 0) + ns
