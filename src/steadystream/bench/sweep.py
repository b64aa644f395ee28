"""Fluid capacity: the highest load at which a stack still meets a jitter SLO.

``--sweep rates=1,2,4,8`` runs each load in turn; ``--sweep rates=search:1-64`` doubles the
load from 1 until the SLO breaks (or 64 is reached), then bisects between the last load that
met it and the first that did not, to within ``precision`` (10 % by default; one stream for
concurrency). ``concurrency=...`` sweeps closed-loop concurrency the same way.

The SLO is a list of objectives on fleet metrics, ``goodput>=99%`` and ``ttft_p95<=800ms`` by
default (goodput itself counts a stream as good when it has no gap over the stall threshold
and its TTFT meets the target). The answer is the highest load that met the SLO with every
lower load measured meeting it too: a pass above a failure is noise, not capacity.

The sweep waits ``cooldown_ns`` on the injected clock between loads, so queues left by one
load do not spill into the next; tests drive it in simulated time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from steadystream._clock import Clock
from steadystream._exceptions import SpecError
from steadystream._units import parse_duration
from steadystream.metrics import FLEET_CATALOGUE, FleetMetrics, find_fleet_metric

__all__ = [
    "DEFAULT_SLO",
    "Objective",
    "SweepPlan",
    "SweepPoint",
    "SweepResult",
    "run_sweep",
]

DEFAULT_SLO = ("goodput>=99%", "ttft_p95<=800ms")

_OBJECTIVE = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=)\s*(.+?)\s*$", re.IGNORECASE)
_PLAN = re.compile(r"^\s*(rates?|concurrency)\s*=\s*(.+?)\s*$", re.IGNORECASE)
_SEARCH = re.compile(r"^search\s*:\s*([0-9]*\.?[0-9]+)\s*-\s*([0-9]*\.?[0-9]+)$", re.IGNORECASE)
_MAX_STEPS = 16  # a search never measures more loads than this


@dataclass(frozen=True, slots=True)
class Objective:
    """One SLO term: ``metric >= value`` or ``metric <= value`` (value in the metric's unit)."""

    metric: str
    at_least: bool
    value: float
    text: str

    @classmethod
    def parse(cls, text: str) -> Objective:
        match = _OBJECTIVE.match(text)
        if match is None:
            raise SpecError(
                f"--slo: cannot read {text!r} (examples: goodput>=99%, ttft_p95<=800ms)"
            )
        name, op, raw = match.groups()
        metric = find_fleet_metric(name, option="--slo").name
        value = _objective_value(metric, raw, text)
        return cls(metric, op == ">=", value, text.strip())

    def met(self, fleet: FleetMetrics) -> bool:
        """Whether the fleet meets it; an undefined metric does not."""
        value = fleet.scalars().get(self.metric)
        if value is None or math.isnan(value):
            return False
        return value >= self.value if self.at_least else value <= self.value

    def describe(self, fleet: FleetMetrics) -> str:
        value = fleet.scalars().get(self.metric)
        info = FLEET_CATALOGUE[self.metric]
        op = ">=" if self.at_least else "<="
        return f"{info.short_name} {info.show(value)} (needs {op} {info.show(self.value)})"


def _objective_value(metric: str, raw: str, text: str) -> float:
    raw = raw.strip()
    unit = FLEET_CATALOGUE[metric].unit
    if unit == "seconds":
        return parse_duration(raw, name=f"--slo {text}") / 1e9
    percent = raw.endswith("%")
    if percent and unit != "share":
        raise SpecError(f"--slo: {metric} is no share; {raw!r} in {text!r} cannot be a percent")
    try:
        value = float(raw[:-1]) / 100 if percent else float(raw)
    except ValueError:
        raise SpecError(f"--slo: cannot read {raw!r} in {text!r}") from None
    if not math.isfinite(value):
        raise SpecError(f"--slo: {raw!r} in {text!r} is no number")
    if unit == "share" and not 0 <= value <= 1:
        # (a bound no run can meet, or every run meets, would make the sweep meaningless)
        raise SpecError(f"--slo: {metric} is a share from 0% to 100%; {raw!r} in {text!r}")
    if unit == "count" and value < 0:
        raise SpecError(f"--slo: {metric} is a count; {raw!r} in {text!r} is below 0")
    return value


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """Which load to vary (``rate`` or ``concurrency``), over a list or by search."""

    dimension: str
    loads: tuple[float, ...] = ()
    search: tuple[float, float] | None = None
    precision: float = 0.1

    @classmethod
    def parse(cls, text: str) -> SweepPlan:
        match = _PLAN.match(text)
        if match is None:
            raise SpecError(
                f"--sweep: cannot read {text!r} "
                "(examples: rates=1,2,4,8  rates=search:1-64  concurrency=1,4,16)"
            )
        key, values = match.groups()
        dimension = "concurrency" if key.lower() == "concurrency" else "rate"
        integral = dimension == "concurrency"
        if search := _SEARCH.match(values):
            low, high = float(search[1]), float(search[2])
            if not 0 < low < high:
                raise SpecError(f"--sweep: search needs 0 < LOW < HIGH, got {values!r}")
            if integral and (low != int(low) or high != int(high)):
                raise SpecError("--sweep: concurrency search bounds must be whole numbers")
            return cls(dimension, search=(low, high))
        try:
            loads = tuple(float(v) for v in values.split(",") if v.strip())
        except ValueError:
            raise SpecError(f"--sweep: cannot read the loads in {text!r}") from None
        if not loads or any(not (math.isfinite(v) and v > 0) for v in loads):
            raise SpecError(f"--sweep: loads must be positive numbers, got {values!r}")
        if integral and any(v != int(v) for v in loads):
            raise SpecError("--sweep: concurrency values must be whole numbers")
        return cls(dimension, loads=tuple(sorted(set(loads))))

    def describe(self) -> str:
        if self.search is not None:
            return f"{self.dimension}: search {self.search[0]:g}-{self.search[1]:g}"
        return f"{self.dimension}: {', '.join(f'{v:g}' for v in self.loads)}"


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One load measured: its fleet metrics and the SLO verdict."""

    load: float
    fleet: FleetMetrics
    passed: bool
    misses: list[str]  # the objectives it missed, in words
    client_kept_up: bool  # False: the client lagged, so the point understates the stack


@dataclass
class SweepResult:
    plan: SweepPlan
    objectives: list[Objective]
    points: list[SweepPoint] = field(default_factory=list)

    @property
    def answer(self) -> float | None:
        """The highest load that met the SLO with every lower measured load meeting it."""
        best = None
        for point in sorted(self.points, key=lambda p: p.load):
            if not point.passed:
                break
            best = point.load
        return best

    @property
    def noisy(self) -> bool:
        """A load passed above one that failed."""
        ordered = sorted(self.points, key=lambda p: p.load)
        failed = False
        for point in ordered:
            if failed and point.passed:
                return True
            failed = failed or not point.passed
        return False


Measure = Callable[[float], Awaitable[tuple[FleetMetrics, bool]]]
"""Run one load; return its fleet metrics and whether the client kept up."""


async def run_sweep(
    plan: SweepPlan,
    objectives: Sequence[Objective],
    measure: Measure,
    *,
    clock: Clock,
    cooldown_ns: int = 0,
    on_point: Callable[[SweepPoint], None] | None = None,
) -> SweepResult:
    """Measure loads as the plan says and find the answer."""
    if not objectives:
        raise SpecError("--slo: a sweep needs at least one objective")
    result = SweepResult(plan, list(objectives))

    async def point(load: float) -> bool:
        if result.points and cooldown_ns > 0:
            await clock.sleep_until(clock.now_ns() + cooldown_ns)
        fleet, kept_up = await measure(load)
        misses = [o.describe(fleet) for o in objectives if not o.met(fleet)]
        measured = SweepPoint(load, fleet, not misses, misses, kept_up)
        result.points.append(measured)
        if on_point is not None:
            on_point(measured)
        return measured.passed

    if plan.search is None:
        for load in plan.loads:
            await point(load)
        return result
    await _search(plan, point)
    return result


async def _search(plan: SweepPlan, point: Callable[[float], Awaitable[bool]]) -> None:
    assert plan.search is not None
    low, high = plan.search
    integral = plan.dimension == "concurrency"
    steps = 0
    passing: float | None = None
    failing: float | None = None
    load = low
    while steps < _MAX_STEPS:
        steps += 1
        if await point(load):
            passing = load
            if load >= high:
                return
            load = min(load * 2, high)
        else:
            failing = load
            break
    if passing is None or failing is None:
        return
    while steps < _MAX_STEPS:
        if integral:
            if failing - passing <= 1:
                return
            mid = float((int(passing) + int(failing)) // 2)
        else:
            if (failing - passing) <= plan.precision * passing:
                return
            mid = (passing + failing) / 2
        steps += 1
        if await point(mid):
            passing = mid
        else:
            failing = mid
