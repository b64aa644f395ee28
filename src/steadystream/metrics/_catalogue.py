"""The catalogue of fleet metrics: what each number is, once (docs/metrics.md#fleet).

Each single-number field of :class:`FleetMetrics` has one entry here with its words (a row
label, a short header, a note), its unit, which way is better and how it is shown. The CLI
tables, the report's cards, the gate, the sweep's SLO and the demo all read it, as AIPerf's
metric classes carry their own header, unit and direction: a metric added to
:class:`FleetMetrics` is added here too, and ``tests/test_metric_catalogue.py`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from steadystream._exceptions import SpecError
from steadystream._units import format_count, format_number, format_seconds, format_share

__all__ = ["FLEET_CATALOGUE", "RUN_SETTINGS", "MetricInfo", "find_fleet_metric"]

Unit = Literal["seconds", "share", "count", "number"]
Better = Literal["lower", "higher"]

RUN_SETTINGS = ("stall_threshold_s", "ttft_target_s")
"""Numeric fields of :class:`FleetMetrics` that are the run's settings, not results."""


@dataclass(frozen=True, slots=True)
class MetricInfo:
    """One fleet metric: its words, its unit and which way is better.

    ``note`` may name ``{threshold}`` and ``{target}`` (the stall threshold and the TTFT
    target); :meth:`describe` fills them in.
    """

    name: str  # the FleetMetrics field
    label: str  # a table row: "p99 of worst gap"
    header: str  # a narrow column or a card: "worst gap, p99"
    unit: Unit
    better: Better | None  # None: neither way is better in general
    note: str = ""
    hint: str = ""  # said beside the label where there is room: "the freezes people watched"
    digits: int = 2  # decimals of a plain number

    @property
    def worse(self) -> int | None:
        """+1 when a rise is bad, -1 when a fall is, None when unknown (the gate's sign)."""
        if self.better is None:
            return None
        return +1 if self.better == "lower" else -1

    @property
    def short_name(self) -> str:
        """The name people type: without the ``_s`` of seconds (``p99_of_p99``)."""
        return self.name.removesuffix("_s")

    @property
    def long_label(self) -> str:
        """The label with its hint: ``p99 of worst gap  (the freezes people watched)``."""
        return f"{self.label}  ({self.hint})" if self.hint else self.label

    def show(self, value: float | None, *, narrow: bool = False) -> str:
        """The value as a person reads it; ``—`` when undefined."""
        if self.unit == "seconds":
            return format_seconds(value, narrow=narrow)
        if self.unit == "share":
            return format_share(value, narrow=narrow)
        if self.unit == "count":
            return format_count(value)
        return format_number(value, self.digits)

    def describe(self, *, threshold: str, target: str) -> str:
        """The note with the run's stall threshold and TTFT target written in."""
        return self.note.format(threshold=threshold, target=target)


def _entries(*infos: MetricInfo) -> Mapping[str, MetricInfo]:
    return MappingProxyType({info.name: info for info in infos})


def _time(name: str, label: str, header: str, note: str, hint: str = "") -> MetricInfo:
    return MetricInfo(name, label, header, "seconds", "lower", note, hint)


FLEET_CATALOGUE: Mapping[str, MetricInfo] = _entries(
    MetricInfo("streams", "streams", "streams", "count", None, "streams in the run"),
    MetricInfo("output_tokens", "output tokens", "tokens", "count", None, "tokens delivered"),
    _time(
        "p99_of_p99_s",
        "p99 of per-stream p99 gap",
        "p99 gap, p99",
        "each stream's p99 gap; 99th percentile across streams (p99-of-p99)",
        "tail of the tail",
    ),
    _time(
        "p99_of_worst_gap_s",
        "p99 of worst gap",
        "worst gap, p99",
        "each stream's longest freeze; 99th percentile across streams",
        "the freezes people watched",
    ),
    _time(
        "p50_of_p99_s",
        "p50 of per-stream p99 gap",
        "p99 gap, p50",
        "each stream's p99 gap; the median stream",
    ),
    _time(
        "p90_of_p99_s",
        "p90 of per-stream p99 gap",
        "p99 gap, p90",
        "each stream's p99 gap; 90th percentile across streams",
    ),
    _time(
        "p50_of_worst_gap_s",
        "p50 of worst gap",
        "worst gap, p50",
        "each stream's longest freeze; the median stream",
    ),
    _time(
        "p90_of_worst_gap_s",
        "p90 of worst gap",
        "worst gap, p90",
        "each stream's longest freeze; 90th percentile across streams",
    ),
    MetricInfo(
        "goodput",
        "ITL goodput",
        "ITL goodput",
        "share",
        "higher",
        "streams with TTFT ≤ {target} and no gap above {threshold}",
    ),
    MetricInfo(
        "unstable_share",
        "unstable streams",
        "unstable streams",
        "share",
        "lower",
        "share of streams whose p99/p50 gap ratio is above the jitter flag",
        "p99/p50 > flag",
    ),
    MetricInfo(
        "stall_count", "stalls", "stalls", "count", "lower", "gaps above {threshold}, all streams"
    ),
    MetricInfo(
        "stalls_per_1k_tokens",
        "stalls per 1,000 tokens",
        "stalls / 1,000 tokens",
        "number",
        "lower",
        "gaps above {threshold} per 1,000 output tokens",
    ),
    _time("ttft_p50_s", "TTFT p50", "TTFT p50", "time to first visible token, median stream"),
    _time("ttft_p90_s", "TTFT p90", "TTFT p90", "time to first visible token, 90th percentile"),
    _time("ttft_p95_s", "TTFT p95", "TTFT p95", "time to first visible token, 95th percentile"),
    _time("ttft_p99_s", "TTFT p99", "TTFT p99", "time to first visible token, 99th percentile"),
    MetricInfo(
        "reasoning_streams",
        "streams that reasoned",
        "reasoning streams",
        "count",
        None,
        "streams with a reasoning token: TTFR is taken over these",
    ),
    _time(
        "ttfr_p50_s",
        "TTFR p50",
        "TTFR p50",
        "time to first reasoning token, median stream that reasoned",
        "first reasoning token",
    ),
    _time(
        "ttfr_p99_s",
        "TTFR p99",
        "TTFR p99",
        "time to first reasoning token, 99th percentile of the streams that reasoned",
        "first reasoning token",
    ),
    _time(
        "tpot_p50_s",
        "TPOT p50",
        "TPOT p50",
        "time per output token after the first, median stream",
        "an average: hides freezes",
    ),
    _time("e2el_p50_s", "E2EL p50", "E2EL p50", "time to the last token, median stream"),
    *(
        _time(
            f"pooled_gap_{q}_s",
            f"pooled gap {q}",
            f"pooled gap {q}",
            f"{q} of every gap of every stream in one pool",
            "vLLM's convention",
        )
        for q in ("p50", "p90", "p95", "p99", "max")
    ),
    MetricInfo(
        "qoe_mean",
        "Andes QoE, mean",
        "QoE",
        "number",
        "higher",
        "Andes quality of experience, 0-1, mean across streams",
        digits=3,
    ),
    MetricInfo(
        "fluidity_mean",
        "Etalon fluidity, mean",
        "fluidity",
        "number",
        "higher",
        "Etalon fluidity index, 0-1, mean across streams",
        digits=3,
    ),
    MetricInfo(
        "tokens_per_chunk_mean",
        "tokens per chunk, mean",
        "tokens / chunk",
        "number",
        None,
        "tokens each text event carries, mean across streams",
    ),
    MetricInfo(
        "envelope_overhead_mean",
        "wire bytes per content byte",
        "wire / content bytes",
        "number",
        "lower",
        "bytes on the wire per byte of text, mean across streams",
    ),
    MetricInfo(
        "head_burst_p50",
        "head burst, p50",
        "head burst",
        "number",
        None,
        "tokens in the head window after TTFT over the steady rate; 1 is steady",
    ),
)
"""Every single-number result of :class:`FleetMetrics`, in its field order."""


def find_fleet_metric(name: str, *, option: str) -> MetricInfo:
    """The entry of ``name``, typed with or without its ``_s`` (``ttft_p95``, ``ttft_p95_s``).

    Raises :class:`SpecError` naming ``option`` and every known name when there is none.
    """
    for candidate in (name, f"{name}_s"):
        if candidate in FLEET_CATALOGUE:
            return FLEET_CATALOGUE[candidate]
    known = ", ".join(info.short_name for info in FLEET_CATALOGUE.values())
    raise SpecError(f"{option}: unknown metric {name!r}; known: {known}")
