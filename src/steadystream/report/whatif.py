"""The what-if table: the run as recorded, then after each pacer, in the report's units."""

from __future__ import annotations

from steadystream._units import format_duration, format_seconds
from steadystream.metrics import FLEET_CATALOGUE
from steadystream.report.model import WhatIfTable
from steadystream.shaping.whatif import Scorecard, WhatIf

__all__ = ["WHATIF_COLUMNS", "whatif_table"]

# The scorecard's metrics, shown with their catalogue entries' headers and forms.
_SCORES = (
    "p99_of_p99_s",
    "p99_of_worst_gap_s",
    "stall_count",
    "goodput",
    "ttft_p99_s",
    "qoe_mean",
)

WHATIF_COLUMNS = [
    "pacer",
    "added TTFT p50",
    "added TTFT p99",
    "tail delay p99",
    *(FLEET_CATALOGUE[name].header for name in _SCORES),
]


def whatif_table(result: WhatIf) -> WhatIfTable:
    """One row for the recorded run and one per pacer of :func:`~steadystream.shaping.what_if`."""
    rows = [["as recorded", "—", "—", "—", *_scores(result.before)]]
    for index, outcome in enumerate(result.pacers):
        mark = " (best)" if index == result.best else ""
        if not outcome.within_limit:
            mark = " (adds more TTFT than allowed)"
        rows.append(
            [
                outcome.spec + mark,
                format_seconds(outcome.added_ttft_p50_s),
                format_seconds(outcome.added_ttft_p99_s),
                format_seconds(outcome.tail_delay_p99_s),
                *_scores(outcome.after),
            ]
        )
    threshold = format_duration(result.config.stall_threshold_ns)
    note = (
        f"Every stream of the run simulated through each pacer ({result.streams:,} streams)."
        " Added TTFT and tail delay are per stream: how much later the first and the last"
        f" token reach the reader. Stalls are gaps above {threshold}. Best: fewest stalls,"
        " then the lowest worst gap, p99 gap and tail delay"
    )
    if result.max_added_ttft_ns is not None:
        note += f", among pacers adding at most {format_duration(result.max_added_ttft_ns)} TTFT"
    return WhatIfTable(columns=list(WHATIF_COLUMNS), rows=rows, note=note + ".")


def _scores(card: Scorecard) -> list[str]:
    return [FLEET_CATALOGUE[name].show(getattr(card, name)) for name in _SCORES]
