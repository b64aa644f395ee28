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
    """A new plan with ``injections`` applied in order; every draw comes from ``rng``.

    Array work, not a loop per event: the documented bound of injections on a long stream
    (10,000 on 5,000 events) builds in well under a second, not minutes on the event loop."""
    work = _Work(plan)
    for injection in injections:
        token = injection.position.token(work.total, rng) if injection.position else None
        # the event that carries the token; len(times) when the token is past the end
        event = None if token is None else int(np.searchsorted(work.starts, token, "right")) - 1
        if event is not None and token is not None and token >= work.total:
            event = work.n
        record: dict[str, Any] = {"spec": injection.spec, "token": token, "event": event}
        record.update(work.apply(injection, event, rng))
        work.applied.append(record)
    return work.plan()


class _Work:
    """A plan being injected: its times and injected delays as int64 arrays."""

    def __init__(self, plan: Plan) -> None:
        self.base = plan
        self.times = np.array(plan.times, dtype=np.int64)
        self.n = len(plan.times)
        tokens = np.array(plan.tokens, dtype=np.int64)
        self.ends = np.cumsum(tokens)  # the token after each event's last
        self.starts = self.ends - tokens  # each event's first token
        self.total = int(self.ends[-1]) if self.n else 0
        self.end_ns = plan.end_ns
        self.cut_at, self.cut = plan.cut_at, plan.cut
        self.applied = list(plan.applied)
        self.charged: dict[Cause, np.ndarray] = {}  # by cause, ns per event, in order of use

    def apply(
        self, injection: Injection, event: int | None, rng: np.random.Generator
    ) -> dict[str, Any]:
        times, n = self.times, self.n
        if injection.kind == "jitter":
            assert injection.duration_ns is not None
            draws = np.rint(rng.uniform(0, injection.duration_ns, size=n)).astype(np.int64)
            before = np.diff(times, prepend=0)
            # each no earlier than the one before it (nor than the arrival): order is kept
            np.maximum.accumulate(np.maximum(times + draws, 0), out=times)
            change = np.diff(times, prepend=0) - before
            change[change < 0] = 0
            self._charge(Cause.NETWORK_BUFFERING, change)
            self.end_ns = max(self.end_ns, int(times[-1]) if n else 0)
            return {"fired": n > 0, "added_ns": int(change.sum())}
        assert event is not None
        fired = event < n
        if injection.kind in ("stall", "truncate") and injection.duration_ns is None:
            if not fired:  # (past the end: the whole answer goes out, as for any fault there)
                return {"fired": False, "added_ns": None}
            cut: Cut = "stall" if injection.kind == "stall" else "truncate"
            if self.cut_at is None or event < self.cut_at:
                self.cut_at, self.cut = event, cut
            return {"fired": True, "added_ns": None}
        if not fired:
            return {"fired": False, "added_ns": 0}
        if injection.kind == "burst":
            last_token = min(self.total - 1, int(self.starts[event]) + injection.count - 1)
            last = min(int(np.searchsorted(self.ends, last_token, "right")), n - 1)
            held = int(times[last] - times[event])
            times[event:last] = times[last]
            if held > 0:
                self._charge_one(Cause.HEAD_BURST, event, held)
            return {"fired": True, "added_ns": held, "last_event": last}
        assert injection.duration_ns is not None
        times[event:] += injection.duration_ns
        self.end_ns += injection.duration_ns
        self._charge_one(Cause.INJECTED_FAULT, event, injection.duration_ns)
        return {"fired": True, "added_ns": injection.duration_ns}

    def _column(self, cause: Cause) -> np.ndarray:
        column = self.charged.get(cause)
        if column is None:
            column = self.charged[cause] = np.zeros(self.n, dtype=np.int64)
        return column

    def _charge(self, cause: Cause, ns: np.ndarray) -> None:
        if ns.any():
            self._column(cause)[:] += ns

    def _charge_one(self, cause: Cause, event: int, ns: int) -> None:
        self._column(cause)[event] += ns

    def plan(self) -> Plan:
        extra = [dict(e) for e in self.base.extra]
        for cause, column in self.charged.items():
            for i in np.flatnonzero(column).tolist():
                extra[i][cause] = extra[i].get(cause, 0) + int(column[i])
        return replace(
            self.base,
            times=self.times.tolist(),
            end_ns=self.end_ns,
            extra=extra,
            cut_at=self.cut_at,
            cut=self.cut,
            applied=self.applied,
        )
