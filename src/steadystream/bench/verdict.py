"""The gate's verdict on two recorded runs, as ``steadystream gate`` and ``bench --gate`` give it.

:func:`judge_runs` compares the fleet metrics of a baseline run and a current run under
the gate's limits (:func:`~steadystream.bench.gate.parse_rules`), each with the bootstrap
interval of its value and its change (:mod:`steadystream.metrics.bootstrap`; a rule whose
interval straddles its limit is ``unsure``: too few streams to judge), and adds what a
reader must know to trust the verdict: how many streams each run has, what the runs were too
small to judge, a run whose last line was cut off, or one recorded while the bench client
lagged (then the verdict may be about the client, not the server).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from steadystream._exceptions import InputError
from steadystream.bench.gate import GateReport, GateRow, GateRule, RunDraws, compare
from steadystream.bench.health import LAGGED_SHARE_LIMIT, lagged_streams
from steadystream.metrics import MetricConfig, fleet_metrics, stream_table
from steadystream.metrics.bootstrap import LEVEL, RESAMPLES, fleet_draws
from steadystream.timeline import Timeline

__all__ = ["GateVerdict", "LoadedRun", "judge_runs", "load_files", "load_run", "load_runs"]


@dataclass(frozen=True)
class LoadedRun:
    """A recorded run: its streams, and a note when its last line was cut off."""

    path: Path
    timelines: list[Timeline]
    note: str | None = None


def load_run(path: Path, *, required: bool = True, format: str | None = None) -> LoadedRun:
    """A run's timelines, and a note when its last line was cut off (the streams before it
    count); with ``required``, a file with no streams is an :class:`~steadystream.InputError`.
    ``format`` names what the file is (default: found from its content, docs/format.md#peers).

    ``gate``, ``bench --gate``, ``analyze`` and ``report`` read runs so.
    """
    from steadystream.files import read_timelines

    result = read_timelines(path, format=format)
    if required and not result.timelines:
        raise InputError(f"{path}: no streams in this run")
    note = None
    if result.truncated_line is not None:
        note = (
            f"{path}: line {result.truncated_line} was cut off mid-record; every complete "
            "stream before it was loaded"
        )
    return LoadedRun(Path(path), result.timelines, note)


def load_runs(
    paths: Sequence[Path], *, format: str | None = None
) -> tuple[list[Timeline], list[str]]:
    """Several files read as one run (``analyze``, ``report``): every stream, and the notes."""
    timelines, _, notes = load_files(paths, format=format)
    return timelines, notes


def load_files(
    paths: Sequence[Path], *, format: str | None = None
) -> tuple[list[Timeline], list[int], list[str]]:
    """:func:`load_runs`, with the file each stream came from (its place in ``paths``):
    two files that reuse a stream id hold two streams (``stream_numbers``)."""
    runs = [load_run(path, required=False, format=format) for path in paths]
    return (
        [t for run in runs for t in run.timelines],
        [f for f, run in enumerate(runs) for _ in run.timelines],
        [run.note for run in runs if run.note],
    )


@dataclass(frozen=True)
class GateVerdict:
    """The gate's table for ``current`` against ``baseline``, and notes on trusting it."""

    baseline: Path
    current: Path
    report: GateReport
    notes: list[str]
    baseline_streams: int = 0
    current_streams: int = 0
    level: float = LEVEL  # of the bootstrap intervals

    @property
    def passed(self) -> bool:
        """No limit broken and none left undecided."""
        return self.report.passed


MIN_STREAMS = 2
"""The fewest streams a run may have for a rule to be judged on it: a release gate does not
pass (nor fail) on the evidence of one stream."""


def judge_runs(
    baseline: LoadedRun,
    current: LoadedRun,
    rules: Sequence[GateRule],
    config: MetricConfig | None = None,
) -> GateVerdict:
    """Judge ``current`` against ``baseline`` under ``rules`` (from :func:`parse_rules`)."""
    config = config if config is not None else MetricConfig()
    before, after = (
        stream_table(baseline.timelines, config),
        stream_table(current.timelines, config),
    )
    gated = [rule.metric for rule in rules]
    draws = RunDraws(
        fleet_draws(before, gated, config, seed=0),
        fleet_draws(after, gated, config, seed=1),  # independent draws of the two runs
    )
    report = compare(fleet_metrics(before, config), fleet_metrics(after, config), rules, draws)
    sizes = (len(before), len(after))
    if min(sizes) < MIN_STREAMS:
        # One stream's bootstrap has no spread: it would "pass" or "fail" on no evidence.
        report = GateReport(
            [
                replace(r, verdict="unsure") if r.verdict in ("pass", "FAIL") else r
                for r in report.rows
            ]
        )
    undecided = (_too_few(row, rule, sizes) for row, rule in zip(report.rows, rules, strict=True))
    notes = [note for note in undecided if note is not None]
    notes += [run.note for run in (baseline, current) if run.note]
    for run in (baseline, current):
        lagged = lagged_streams(run.timelines)
        if lagged > LAGGED_SHARE_LIMIT * len(run.timelines):
            notes.append(
                f"{run.path}: {lagged} of {len(run.timelines)} streams were stamped while the "
                "bench client lagged; the verdict may reflect the client, not the server"
            )
    return GateVerdict(baseline.path, current.path, report, notes, *sizes)


def _too_few(row: GateRow, rule: GateRule, sizes: tuple[int, int]) -> str | None:
    """What an ``unsure`` rule could not tell, in words, and what would tell it."""
    if row.verdict != "unsure":
        return None
    streams = f"{sizes[0]:,} and {sizes[1]:,} streams"
    name = rule.metric.removesuffix("_s")
    if min(sizes) < MIN_STREAMS:
        return (
            f"too few streams to judge {name} ({streams}): a run needs {MIN_STREAMS} streams"
            " at least for its spread to be known; bench more streams"
        )
    if row.change_interval is None:
        return (
            f"too few streams to judge {name} ({streams}): it is undefined in most of"
            f" {RESAMPLES:,} bootstrap draws; bench more streams"
        )
    low, high = (rule.show_change(v) for v in row.change_interval)
    return (
        f"too few streams to judge {name} ({streams}): its change could be anywhere from"
        f" {low} to {high} ({LEVEL:.0%} bootstrap interval), across the {rule.describe()}"
        " limit; more streams narrow it (4 times as many about halve it)"
    )
