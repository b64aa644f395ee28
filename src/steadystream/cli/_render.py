"""Rendering of run summaries: rich tables for people, JSON for scripts."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from steadystream._units import format_duration
from steadystream.bench.summary import Summary

__all__ = ["print_summary", "to_json"]


def _s(value: float | None) -> str:
    return format_duration(None if value is None else value * 1e9)


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


# (label, how to show it, FleetMetrics attribute); the headline rows come first.
_ROWS: list[tuple[str, Any, str]] = [
    ("streams", str, "streams"),
    ("p99 of worst gap  (the freezes people watched)", _s, "p99_of_worst_gap_s"),
    ("p99 of per-stream p99 gap  (tail of the tail)", _s, "p99_of_p99_s"),
    ("ITL goodput", _share, "goodput"),
    ("unstable streams (p99/p50 > flag)", _share, "unstable_share"),
    ("stalls per 1,000 tokens", _num, "stalls_per_1k_tokens"),
    ("p50 of worst gap", _s, "p50_of_worst_gap_s"),
    ("p90 of worst gap", _s, "p90_of_worst_gap_s"),
    ("p50 of per-stream p99 gap", _s, "p50_of_p99_s"),
    ("p90 of per-stream p99 gap", _s, "p90_of_p99_s"),
    ("TTFT p50", _s, "ttft_p50_s"),
    ("TTFT p95", _s, "ttft_p95_s"),
    ("TTFT p99", _s, "ttft_p99_s"),
    ("TPOT p50  (an average: hides freezes)", _s, "tpot_p50_s"),
    ("E2EL p50", _s, "e2el_p50_s"),
    ("pooled gap p50  (vLLM's convention)", _s, "pooled_gap_p50_s"),
    ("pooled gap p99  (vLLM's convention)", _s, "pooled_gap_p99_s"),
    ("Andes QoE, mean", _num, "qoe_mean"),
    ("Etalon fluidity, mean", _num, "fluidity_mean"),
    ("tokens per chunk, mean", _num, "tokens_per_chunk_mean"),
    ("wire bytes per content byte", _num, "envelope_overhead_mean"),
    ("output tokens", str, "output_tokens"),
]


def print_summary(summary: Summary, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=120)
    cfg = summary.config
    title = (
        f"Fleet — stall threshold {format_duration(cfg.stall_threshold_ns)}, "
        f"TTFT target {format_duration(cfg.ttft_target_ns)}"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    columns = {"all": summary.fleet, **summary.groups}
    for name in columns:
        table.add_column(name if name == "all" else f"{summary.by}={name}", justify="right")
    for label, show, attr in _ROWS:
        table.add_row(label, *(show(getattr(m, attr)) for m in columns.values()))
    console.print(table)

    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.fleet.outcomes.items()))
    sources = ", ".join(f"{k} {v}" for k, v in sorted(summary.fleet.token_sources.items()))
    console.print(f"outcomes: {outcomes or '—'}    token counts: {sources or '—'}")

    if summary.worst:
        worst = Table(title="Worst streams, by worst gap", title_justify="left")
        for column in (
            "stream",
            "worst gap",
            "at token",
            "p99 gap",
            "stalls",
            "TTFT",
            "tokens",
            "outcome",
        ):
            worst.add_column(column, justify="left" if column in ("stream", "outcome") else "right")
        for m in summary.worst:
            at = (
                "—"
                if m.longest_stall_token is None
                else (f"{m.longest_stall_token} ({m.longest_stall_fraction or 0:.0%})")
            )
            worst.add_row(
                m.stream_id,
                _s(m.max_gap_s),
                at,
                _s(m.gap_p99_s),
                str(m.stall_count or 0),
                _s(m.ttft_s),
                str(m.output_tokens),
                m.outcome.value,
            )
        console.print(worst)
    for finding in summary.findings:
        console.print(f"[bold yellow]finding[/] [dim]{finding.code}[/]: {finding.message}")
    for note in summary.notes:
        console.print(f"[bold]note:[/] {note}")


def to_json(summary: Summary) -> str:
    payload = {
        "config": {
            "stall_threshold_s": summary.config.stall_threshold_ns / 1e9,
            "ttft_target_s": summary.config.ttft_target_ns / 1e9,
            "jitter_flag": summary.config.jitter_flag,
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
        "notes": summary.notes,
    }
    return orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode()
