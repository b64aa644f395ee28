"""The release gate: compare two runs' fleet metrics against regression limits.

A rule is ``METRIC=LIMIT``. METRIC is any single-number fleet metric
(:meth:`FleetMetrics.scalars`), with or without its ``_s`` suffix: ``p99_of_p99``,
``goodput``, ``ttft_p95``... LIMIT is how far the metric may move in its bad direction:

- ``10%``: relative to the baseline;
- ``2pt``: absolute percentage points, for shares (goodput, unstable_share);
- ``50ms``, ``0.2s``: absolute, for times;
- ``3``: absolute, in the metric's own unit.

Directions come from the catalogue of fleet metrics (``metrics.FLEET_CATALOGUE``): higher is
worse for times, stalls and the unstable share, lower is worse for goodput, QoE and fluidity.
A sign may be written (``goodput=-2pt``, ``unstable_share=+1pt``) and must then agree; a
metric with no known direction (for example ``tokens_per_chunk_mean``) needs one. A metric
undefined in either run cannot be judged and is shown as ``n/a``, never as a pass or a failure.

Given bootstrap draws of both runs (:class:`RunDraws`, from
:func:`~steadystream.metrics.bootstrap.fleet_draws`), a rule is judged on the spread too: it
passes only when even the bad end of the change's interval keeps within the limit, fails
only when even its good end breaks it, and is ``unsure`` when the interval straddles the
limit. Too few streams to judge is not a pass: a release gate does not pass on too little
evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from steadystream._exceptions import SpecError
from steadystream._units import format_duration, parse_duration
from steadystream.metrics import FLEET_CATALOGUE, FleetMetrics, find_fleet_metric
from steadystream.metrics.bootstrap import LEVEL, percentile_interval

__all__ = [
    "DEFAULT_RULES",
    "GateReport",
    "GateRow",
    "GateRule",
    "RunDraws",
    "compare",
    "gateable_metrics",
    "parse_rules",
    "show_value",
]

DEFAULT_RULES = (
    "p99_of_p99=10%",
    "p99_of_worst_gap=10%",
    "goodput=-2pt",
    "ttft_p95=15%",
    "unstable_share=+1pt",
)
"""The limits ``gate`` applies unless told otherwise (each can be overridden by name)."""

Values = TypeVar("Values", float, npt.NDArray[np.float64])

_LIMIT = re.compile(r"^\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(%|pt|[a-zµ]+)?\s*$", re.IGNORECASE)
_EPSILON = 1e-12  # float noise: a change exactly at the limit passes


def gateable_metrics() -> list[str]:
    """Names a rule may use (each also accepted without its ``_s`` suffix)."""
    return sorted(FLEET_CATALOGUE)


@dataclass(frozen=True, slots=True)
class GateRule:
    """``metric`` may move at most ``limit`` in direction ``worse`` (+1 up, -1 down)."""

    metric: str
    worse: int
    limit: float
    unit: str  # "%": relative; "pt": share points; "s": seconds; "": the metric's unit
    text: str

    @classmethod
    def parse(cls, text: str) -> GateRule:
        name, sep, limit = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpecError(f"--max-regression: expected METRIC=LIMIT, got {text!r}")
        info = find_fleet_metric(name, option="--max-regression")
        metric = info.name
        match = _LIMIT.match(limit)
        if match is None:
            raise SpecError(
                f"--max-regression {name}: cannot read limit {limit!r} "
                "(examples: 10%, -2pt, +1pt, 50ms)"
            )
        sign, number, suffix = match.groups()
        suffix = (suffix or "").lower()
        known = info.worse
        written = {"+": 1, "-": -1}.get(sign)
        if written is None and known is None:
            raise SpecError(
                f"--max-regression {name}: say which way is worse with a sign, "
                f"e.g. {name}=+{number}{suffix} (rises are bad) or {name}=-{number}{suffix}"
            )
        if written is not None and known is not None and written != known:
            way = "lower" if known < 0 else "higher"
            fix = "-" if known < 0 else "+"
            raise SpecError(
                f"--max-regression {name}: {way} is worse for this metric, so its limit "
                f"is written {name}={fix}{number}{suffix}"
            )
        worse = written if written is not None else known
        assert worse is not None
        value = float(number)
        if not math.isfinite(value):  # digits past a float's range: no limit at all
            raise SpecError(f"--max-regression {name}: limit {limit.strip()!r} is out of range")
        if suffix == "%":
            unit = "%"
        elif suffix == "pt":
            if info.unit != "share":
                shares = (i.name for i in FLEET_CATALOGUE.values() if i.unit == "share")
                raise SpecError(
                    f"--max-regression {name}: 'pt' (percentage points) is for shares "
                    f"({', '.join(sorted(shares))}); use % instead"
                )
            unit, value = "pt", value / 100
        elif suffix:
            if info.unit != "seconds":
                raise SpecError(f"--max-regression {name}: {metric} is not a time; use % instead")
            unit, value = "s", parse_duration(f"{number}{suffix}", name=name) / 1e9
        else:
            unit = ""
        return cls(metric, worse, value, unit, f"{name}={limit.strip()}")

    def describe(self) -> str:
        sign = "+" if self.worse > 0 else "-"
        if self.unit == "%":
            return f"{sign}{self.limit:g}%"
        if self.unit == "pt":
            return f"{sign}{self.limit * 100:g}pt"
        if self.unit == "s":
            return f"{sign}{format_duration(self.limit * 1e9)}"
        return f"{sign}{self.limit:g}"

    def judge(self, baseline: float | None, current: float | None) -> str:
        """``pass``, ``FAIL``, or ``n/a`` when either value is undefined."""
        if baseline is None or current is None or math.isnan(baseline) or math.isnan(current):
            return "n/a"
        return "FAIL" if self.overshoot(baseline, current) > _EPSILON else "pass"

    def overshoot(self, baseline: Values, current: Values) -> Values:
        """How far past the limit the metric moved the bad way (> 0: broken), in its unit;
        of one pair of values, or of bootstrap draws pair by pair."""
        bad = (current - baseline) * self.worse  # > 0: moved the bad way
        allowed = abs(baseline) * self.limit / 100 if self.unit == "%" else self.limit
        return bad - allowed

    def change(self, baseline: Values, current: Values) -> Values:
        """The change in the limit's unit: percent, percentage points, or the metric's own."""
        delta = current - baseline
        if self.unit == "%":
            return delta / abs(baseline) * 100
        return delta * 100 if self.unit == "pt" else delta

    def show_change(self, value: float) -> str:
        """A change in the limit's unit, signed, as the limit is written (``+12.5%``)."""
        if not math.isfinite(value):
            return "—"
        if self.unit == "%":
            return f"{value:+.1f}%"
        if self.unit == "pt":
            return f"{value:+.2f}pt"
        if self.unit == "s":
            return ("+" if value >= 0 else "-") + format_duration(abs(value) * 1e9)
        return f"{value:+.4g}"


def parse_rules(texts: Iterable[str], *, defaults: bool = True) -> list[GateRule]:
    """Rules from ``--max-regression`` values (each may hold several, comma separated).

    With ``defaults``, :data:`DEFAULT_RULES` apply to every metric not named.
    """
    given: dict[str, GateRule] = {}
    for text in texts:
        for part in text.split(","):
            if part.strip():
                rule = GateRule.parse(part)
                given[rule.metric] = rule
    rules = [GateRule.parse(t) for t in DEFAULT_RULES] if defaults else []
    merged = {r.metric: r for r in rules}
    merged.update(given)
    if not merged:
        raise SpecError("--max-regression: no rules to check")
    return list(merged.values())


Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class GateRow:
    metric: str
    baseline: float | None
    current: float | None
    change: str
    limit: str
    verdict: str  # "pass", "FAIL", "unsure" (too few streams to judge) or "n/a"
    # With bootstrap draws: where each value and the change could be (None: not drawn, or
    # undefined in most draws); the change's interval is in the limit's unit.
    baseline_interval: Interval | None = None
    current_interval: Interval | None = None
    change_interval: Interval | None = None


@dataclass(frozen=True, slots=True)
class GateReport:
    rows: list[GateRow]

    @property
    def passed(self) -> bool:
        """No limit broken, every rule decided (an ``unsure`` rule is not a pass), and at
        least one judged: rules all ``n/a`` (a run whose every stream failed) judged nothing."""
        return self.judged and all(row.verdict in ("pass", "n/a") for row in self.rows)

    @property
    def judged(self) -> bool:
        """Whether any rule could be judged (not every metric undefined in a run)."""
        return any(row.verdict != "n/a" for row in self.rows)

    @property
    def failures(self) -> list[GateRow]:
        return [row for row in self.rows if row.verdict == "FAIL"]

    @property
    def undecided(self) -> list[GateRow]:
        """Rules the runs had too few streams to judge."""
        return [row for row in self.rows if row.verdict == "unsure"]


@dataclass(frozen=True)
class RunDraws:
    """Bootstrap draws of the gated metrics of both runs, draw by draw (``fleet_draws``)."""

    baseline: Mapping[str, npt.NDArray[np.float64]]
    current: Mapping[str, npt.NDArray[np.float64]]
    level: float = LEVEL


def compare(
    baseline: FleetMetrics,
    current: FleetMetrics,
    rules: Sequence[GateRule],
    draws: RunDraws | None = None,
) -> GateReport:
    """Judge ``current`` against ``baseline`` with ``rules``; with ``draws``, on the spread
    of each change too (the module's docstring)."""
    before, after = baseline.scalars(), current.scalars()
    rows = []
    for rule in rules:
        b, c = before.get(rule.metric), after.get(rule.metric)
        row = GateRow(
            metric=rule.metric,
            baseline=b,
            current=c,
            change=_change(rule.metric, b, c),
            limit=rule.describe(),
            verdict=rule.judge(b, c),
        )
        rows.append(row if draws is None else _with_spread(row, rule, draws))
    return GateReport(rows)


def _with_spread(row: GateRow, rule: GateRule, draws: RunDraws) -> GateRow:
    """The row with its intervals, and its verdict kept only where the draws agree with it."""
    before, after = draws.baseline[rule.metric], draws.current[rule.metric]
    level = draws.level
    with np.errstate(invalid="ignore", divide="ignore"):
        overshoot = percentile_interval(rule.overshoot(before, after), level)
        change = percentile_interval(rule.change(before, after), level)
    verdict = row.verdict
    if verdict != "n/a":
        clear = overshoot is not None and (
            overshoot[0] > _EPSILON if verdict == "FAIL" else overshoot[1] <= _EPSILON
        )
        verdict = verdict if clear else "unsure"
    return GateRow(
        row.metric,
        row.baseline,
        row.current,
        row.change,
        row.limit,
        verdict,
        percentile_interval(before, level),
        percentile_interval(after, level),
        change,
    )


def show_value(metric: str, value: float | None) -> str:
    """A metric's value as a person reads it (its catalogue entry's form)."""
    return FLEET_CATALOGUE[metric].show(value)


def _change(metric: str, baseline: float | None, current: float | None) -> str:
    if baseline is None or current is None:
        return "—"
    delta = current - baseline
    unit = FLEET_CATALOGUE[metric].unit
    if unit == "share":
        return f"{delta * 100:+.2f}pt"
    relative = f"{delta / abs(baseline):+.1%}" if baseline else ("±0%" if not delta else "new")
    if unit == "seconds":
        sign = "+" if delta >= 0 else "-"
        return f"{relative} ({sign}{format_duration(abs(delta) * 1e9)})"
    return f"{relative} ({delta:+.4g})"
