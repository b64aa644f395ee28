"""Rendering of run summaries: rich tables for people, JSON for scripts."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from steadystream._units import format_duration, format_seconds, format_share
from steadystream.bench.disconnect import ReconnectSummary
from steadystream.bench.summary import Summary
from steadystream.cli._console import console as stdout_console
from steadystream.cli._console import plain, quoted
from steadystream.glass.edges import EdgeComparison
from steadystream.metrics import FLEET_CATALOGUE

__all__ = ["print_summary", "to_json"]


# The fleet table's rows, headline first; words and form come from the catalogue.
_ROWS = (
    "streams",
    "p99_of_worst_gap_s",
    "p99_of_p99_s",
    "goodput",
    "unstable_share",
    "stalls_per_1k_tokens",
    "p50_of_worst_gap_s",
    "p90_of_worst_gap_s",
    "p50_of_p99_s",
    "p90_of_p99_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "e2el_p50_s",
    "pooled_gap_p50_s",
    "pooled_gap_p99_s",
    "qoe_mean",
    "fluidity_mean",
    "tokens_per_chunk_mean",
    "envelope_overhead_mean",
    "output_tokens",
)
# Shown after TTFT only where a stream reasoned: TTFT is the answer's first token, and the
# wait for the first reasoning token is its own number.
_REASONING_ROWS = ("reasoning_streams", "ttfr_p50_s", "ttfr_p99_s")


def print_summary(summary: Summary, console: Console | None = None) -> None:
    if console is None:
        console = stdout_console()
    cfg = summary.config
    title = (
        f"Fleet — stall threshold {format_duration(cfg.stall_threshold_ns)}, "
        f"TTFT target {format_duration(cfg.ttft_target_ns)}"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    columns = {"all": summary.fleet, **summary.groups}
    for name in columns:
        table.add_column(name if name == "all" else plain(f"{summary.by}={name}"), justify="right")
    reasoned = any(m.reasoning_streams for m in columns.values())
    for name in _ROWS:
        info = FLEET_CATALOGUE[name]
        table.add_row(info.long_label, *(info.show(getattr(m, name)) for m in columns.values()))
        if name == "ttft_p99_s" and reasoned:
            for extra in _REASONING_ROWS:
                shown = FLEET_CATALOGUE[extra]
                values = (shown.show(getattr(m, extra)) for m in columns.values())
                table.add_row(shown.long_label, *values)
    console.print(table)

    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.fleet.outcomes.items()))
    sources = ", ".join(f"{k} {v}" for k, v in sorted(summary.fleet.token_sources.items()))
    console.print(f"outcomes: {outcomes or '—'}    token counts: {sources or '—'}")
    console.print(f"[dim]{cfg.describe_models()}[/]", highlight=False)

    if summary.worst:
        worst = Table(title="Worst streams, by worst gap", title_justify="left")
        thought = any(m.ttfr_s is not None for m in summary.worst)
        for column in (
            "stream",
            "worst gap",
            "at token",
            "p99 gap",
            "stalls",
            "TTFT",
            *(("TTFR",) if thought else ()),
            "tokens",
            "outcome",
        ):
            if column in ("stream", "outcome"):  # whole on any terminal: folded, never cut
                worst.add_column(column, overflow="fold")
            else:
                worst.add_column(column, justify="right")
        for m in summary.worst:
            at = "—"
            if m.longest_stall_token is not None:
                share = format_share(m.longest_stall_fraction, narrow=True)
                at = f"{m.longest_stall_token} ({share})"
            worst.add_row(
                plain(m.stream_id),
                format_seconds(m.max_gap_s),
                at,
                format_seconds(m.gap_p99_s),
                str(m.stall_count or 0),
                format_seconds(m.ttft_s),
                *((format_seconds(m.ttfr_s),) if thought else ()),
                str(m.output_tokens),
                m.outcome.value,
            )
        console.print(worst)
    if summary.explanation is not None:
        from steadystream.cli._explain_view import print_by_cause

        explained = summary.explanation
        print_by_cause(
            explained,
            console,
            title=f"Stall time by cause ({len(explained.stalls)} stalls, waits for a first token"
            " included; steadystream explain tells why each)",
        )
    if summary.edges is not None:
        _print_edges(summary.edges, console)
    if summary.reconnects is not None:
        _print_reconnects(summary.reconnects, console)
    for finding in summary.findings:
        console.print(f"[bold yellow]finding[/] [dim]{finding.code}[/]: {quoted(finding.message)}")
    for note in summary.notes:
        console.print(f"[bold]note:[/] {quoted(note)}")


# Both edges of a page's streams, side by side; words and form come from the catalogue.
EDGE_ROWS = (
    "ttft_p50_s",
    "p99_of_p99_s",
    "p99_of_worst_gap_s",
    "goodput",
    "qoe_mean",
    "fluidity_mean",
)


def _print_edges(edges: EdgeComparison, console: Console) -> None:
    shared = quoted(", ".join(f"{k}={v}" for k, v in sorted(edges.labels.items())))
    title = f"Client and glass edges of {edges.streams} page streams" + (
        f" ({shared})" if shared else ""
    )
    table = Table(title=title, title_justify="left")
    for column in ("metric", "client (page's reader)", "glass (painted)"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name in EDGE_ROWS:
        info = FLEET_CATALOGUE[name]
        table.add_row(
            info.long_label,
            info.show(getattr(edges.client, name)),
            info.show(getattr(edges.glass, name)),
        )
    console.print(table)
    share = FLEET_CATALOGUE["goodput"].show  # a share, as the catalogue shows one
    console.print(
        f"what the browser added: {edges.multi_token_frames} of {edges.frames} frames showed"
        f" more than one token ({share(edges.multi_token_frame_share)}, carrying"
        f" {share(edges.tokens_in_multi_token_frames_share)} of the tokens); arrival to paint"
        f" p50 {format_seconds(edges.paint_delay_p50_s)}, p99"
        f" {format_seconds(edges.paint_delay_p99_s)}, max {format_seconds(edges.paint_delay_max_s)}"
    )


def _print_reconnects(reconnects: ReconnectSummary, console: Console) -> None:
    """What readers who dropped and came back felt (``bench --disconnect``), and how many
    streams chosen for a drop ended before it."""
    line = "reconnects: none"
    if reconnects.reconnects:
        whole = reconnects.lost == 0 and reconnects.doubled == 0 and reconnects.failed == 0
        verdict = "[green]nothing lost or doubled[/]" if whole else "[bold red]not whole[/]"
        line = (
            f"reconnects: {reconnects.reconnects} in {reconnects.streams} streams, {verdict}:"
            f" {reconnects.lost} events lost, {reconnects.doubled} doubled,"
            f" {reconnects.failed} not resumed; the gap felt across a return:"
            f" median {_format_ms(reconnects.median_felt_ms)}, worst"
            f" {_format_ms(reconnects.worst_felt_ms)}"
        )
    if cut := reconnects.interrupted:
        line += f"; {cut} drops whose return the run's end cut short (not judged)"
    if ended := reconnects.ended_before_drop:
        chosen = reconnects.streams + ended
        line += (
            f"; [yellow]{ended} of {chosen} streams chosen for a drop ended before their"
            " drop point[/]"
        )
    console.print(line)


def _format_ms(ms: float | None) -> str:
    return "—" if ms is None else format_seconds(ms / 1e3)


def _reconnects_json(reconnects: ReconnectSummary | None) -> dict[str, Any] | None:
    if reconnects is None:
        return None
    return {
        "streams": reconnects.streams,
        "reconnects": reconnects.reconnects,
        "not_resumed": reconnects.failed,
        "events_lost": reconnects.lost,
        "events_doubled": reconnects.doubled,
        "felt_gap_median_s": _seconds(reconnects.median_felt_ms),
        "felt_gap_max_s": _seconds(reconnects.worst_felt_ms),
        "ended_before_drop": reconnects.ended_before_drop,
        "interrupted": reconnects.interrupted,
    }


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _edges_json(edges: EdgeComparison | None) -> dict[str, Any] | None:
    if edges is None:
        return None
    return {
        "streams": edges.streams,
        "labels": edges.labels,
        "client": edges.client.to_dict(),
        "glass": edges.glass.to_dict(),
        "frames": edges.frames,
        "multi_token_frames": edges.multi_token_frames,
        "multi_token_frame_share": edges.multi_token_frame_share,
        "tokens_in_multi_token_frames_share": edges.tokens_in_multi_token_frames_share,
        "paint_delay_p50_s": edges.paint_delay_p50_s,
        "paint_delay_p99_s": edges.paint_delay_p99_s,
        "paint_delay_max_s": edges.paint_delay_max_s,
    }


def to_json(summary: Summary) -> str:
    payload = {
        "config": {
            "stall_threshold_s": summary.config.stall_threshold_ns / 1e9,
            "ttft_target_s": summary.config.ttft_target_ns / 1e9,
            "jitter_flag": summary.config.jitter_flag,
            "qoe_expected_ttft_s": summary.config.qoe_expected_ttft_ns / 1e9,
            "qoe_pace_s_per_token": summary.config.qoe_pace_ns_per_token / 1e9,
            "qoe_form": summary.config.qoe_form,
            "fluidity_first_deadline_s": summary.config.fluidity_prompt_deadline_ns / 1e9,
            "fluidity_deadline_s": summary.config.fluidity_decode_deadline_ns / 1e9,
            "fluidity_form": summary.config.fluidity_form,
        },
        "fleet": summary.fleet.to_dict(),
        "by": summary.by,
        "groups": {k: v.to_dict() for k, v in summary.groups.items()},
        "worst_streams": [
            {**{k: getattr(m, k) for k in m.__dataclass_fields__}, "outcome": m.outcome.value}
            for m in summary.worst
        ],
        "findings": [
            {"code": f.code, "message": f.message, "streams": f.streams} for f in summary.findings
        ],
        "stall_causes": (
            None
            if summary.explanation is None
            else {c.cause: c.to_json() for c in summary.explanation.by_cause}
        ),
        "notes": summary.notes,
        "edges": _edges_json(summary.edges),
        "reconnects": _reconnects_json(summary.reconnects),
    }
    return orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode()
