"""What ``bench`` and ``gate`` show: the live view, the client's self-check, tables.

The live view redraws twice a second from :meth:`RunProgress.snapshot` on the event loop
itself (a refresh thread would take the GIL at moments the loop cannot choose); a redraw is
about a millisecond of client time, well under the 5 ms loop-lag flag, and ``--no-live``
removes it.
"""

from __future__ import annotations

import asyncio

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from steadystream._tasks import cancel_and_wait
from steadystream._types import Outcome
from steadystream._units import format_seconds, format_share
from steadystream.bench.cancel import CancellationStats
from steadystream.bench.gate import show_value
from steadystream.bench.progress import ProgressSnapshot, RunProgress
from steadystream.bench.sweep import SweepPoint, SweepResult
from steadystream.bench.verdict import GateVerdict
from steadystream.cli._console import plain

__all__ = ["LiveView", "cancellation_table", "gate_heading", "gate_table", "sweep_table"]

_REFRESH_S = 0.5


class LiveView:
    """Progress, streams in flight and the running headline numbers, redrawn in place."""

    def __init__(self, console: Console, *, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled and console.is_terminal
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None

    def follow(
        self, progress: RunProgress, title: str, total: int | None, duration_s: float | None
    ) -> None:
        if not self.enabled:
            return
        self._live = Live(console=self.console, auto_refresh=False, transient=True)
        self._live.start()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._redraw(progress, title, total, duration_s))

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._live is not None:
            self._live.stop()
            self._live = None

    async def _redraw(
        self, progress: RunProgress, title: str, total: int | None, duration_s: float | None
    ) -> None:
        assert self._live is not None
        while True:
            view = render_snapshot(progress.snapshot(), title, total, duration_s)
            self._live.update(view, refresh=True)
            await asyncio.sleep(_REFRESH_S)


def render_snapshot(
    snap: ProgressSnapshot, title: str, total: int | None, duration_s: float | None
) -> Group:
    if total is not None:
        bar = ProgressBar(total=total, completed=snap.finished, width=40)
        counter = f"{snap.finished}/{total} streams"
    else:
        span = duration_s or 1.0
        bar = ProgressBar(total=span, completed=min(snap.elapsed_s, span), width=40)
        counter = f"{snap.elapsed_s:.0f}/{span:.0f} s, {snap.finished} streams"
    head = Table.grid(padding=(0, 2))
    head.add_row(Text(title, style="bold"), bar, counter)
    stats = Table.grid(padding=(0, 3))
    stats.add_row(
        f"in flight [bold]{snap.in_flight}[/]",
        f"p99 of p99 gap [bold]{format_seconds(snap.p99_of_p99_s)}[/]",
        f"p99 of worst gap [bold]{format_seconds(snap.p99_of_worst_gap_s)}[/]",
        f"goodput [bold]{format_share(snap.goodput)}[/]",
        f"TTFT p95 [bold]{format_seconds(snap.ttft_p95_s)}[/]",
        f"errors [bold {'red' if snap.errors else ''}]{snap.errors}[/]",
        f"client-lagged [bold]{snap.lagged_streams}[/]",
    )
    parts: list[Table | Text] = [head, stats]
    if snap.first_error:
        # The server's own words: shown with their control characters (escapes) defused.
        parts.append(Text(f"first error: {plain(snap.first_error).plain}", style="red"))
    return Group(*parts)


def cancellation_table(stats: CancellationStats) -> Table:
    """Cancelled streams: how long the engine took to free them, and what it wasted."""
    table = Table(title="Cancellation (--cancel)", title_justify="left")
    table.add_column("measure")
    for column in ("streams", "p50", "p95", "max"):
        table.add_column(column, justify="right")
    table.add_row("cancelled by the client", str(stats.cancelled), "", "", "")
    rows = (
        ("client left → engine freed the KV (cancellation latency)", stats.latency_ms, "{:.1f} ms"),
        ("client left → engine noticed", stats.notice_ms, "{:.1f} ms"),
        ("tokens generated after the client left (cancellation tax)", stats.tax_tokens, "{:.0f}"),
    )
    for label, spread, shown in rows:
        if spread is not None:
            values = (spread.p50, spread.p95, spread.max)
            table.add_row(label, str(spread.count), *(shown.format(v) for v in values))
    if stats.tax_tokens is None:
        table.caption = "no ground truth: the server is not a lab (see --lab-truth)"
    return table


def gate_heading(verdict: GateVerdict) -> str:
    """What was judged against what, on how many streams: a line of its own (as a table's
    title it would wrap at the table's width, however long the file names)."""
    return (
        f"Gate: {verdict.current} ({verdict.current_streams:,} streams) against"
        f" {verdict.baseline} ({verdict.baseline_streams:,} streams);"
        f" {verdict.level:.0%} bootstrap intervals in brackets"
    )


def gate_table(verdict: GateVerdict) -> Table:
    """The gate's rows, each figure with its bootstrap interval in brackets."""
    report = verdict.report
    table = Table()
    for column in ("metric", "baseline", "current", "change", "limit", "verdict"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in report.rows:
        style = {"FAIL": "bold red", "pass": "green", "unsure": "yellow"}.get(row.verdict, "dim")
        table.add_row(
            row.metric.removesuffix("_s"),
            _with_interval(row.metric, row.baseline, row.baseline_interval),
            _with_interval(row.metric, row.current, row.current_interval),
            row.change,
            row.limit,
            Text(row.verdict, style=style),
        )
    return table


def _with_interval(metric: str, value: float | None, interval: tuple[float, float] | None) -> str:
    shown = show_value(metric, value)
    if interval is None:
        return shown
    low, high = (show_value(metric, bound) for bound in interval)
    return f"{shown} [{low}, {high}]"


def sweep_table(result: SweepResult) -> Table:
    unit = "req/s" if result.plan.dimension == "rate" else "streams"
    table = Table(title=f"Sweep: {result.plan.describe()}", title_justify="left")
    columns = (
        f"load ({unit})",
        "streams",
        "goodput",
        "TTFT p95",
        "p99 of p99",
        "p99 of worst gap",
        "errors",
        "SLO",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for point in sorted(result.points, key=lambda p: p.load):
        table.add_row(*_sweep_row(point))
    return table


def _sweep_row(point: SweepPoint) -> list[str]:
    fleet = point.fleet
    errors = sum(fleet.outcomes.get(o.value, 0) for o in (Outcome.ERROR, Outcome.TRUNCATED))
    verdict = "[green]met[/]" if point.passed else "[red]missed[/]: " + "; ".join(point.misses)
    if not point.client_kept_up:
        verdict += " [yellow](client lagged)[/]"
    return [
        f"{point.load:g}",
        str(fleet.streams),
        format_share(fleet.goodput),
        format_seconds(fleet.ttft_p95_s),
        format_seconds(fleet.p99_of_p99_s),
        format_seconds(fleet.p99_of_worst_gap_s),
        str(errors),
        verdict,
    ]
