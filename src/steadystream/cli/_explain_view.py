"""Rendering of ``explain``: rich tables for people, JSON for scripts."""

from __future__ import annotations

from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from steadystream._units import format_duration
from steadystream.attribution import Explanation, Score
from steadystream.cli._console import console as stdout_console
from steadystream.cli._console import plain, quoted

__all__ = ["print_by_cause", "print_explanation", "to_json"]


def print_by_cause(explanation: Explanation, console: Console, *, title: str) -> None:
    """Stall time by cause, with each cause's mitigation."""
    table = Table(title=title, title_justify="left")
    for column in ("cause", "stalls", "stall time", "share", "what to do"):
        table.add_column(
            column, justify="right" if column in ("stalls", "stall time", "share") else "left"
        )
    for share in explanation.by_cause:
        table.add_row(
            plain(share.cause),
            str(share.stalls),
            format_duration(share.time_s * 1e9),
            f"{share.share:.0%}",
            plain(share.mitigation),
        )
    console.print(table)


def print_explanation(
    explanation: Explanation,
    scored: Score | None,
    notes: list[str],
    *,
    stalls: int,
    console: Console | None = None,
) -> None:
    console = console or stdout_console()
    threshold = format_duration(explanation.stall_threshold_ns)
    console.print(
        f"explain: {len(explanation.stalls)} stalls over {threshold} in"
        f" {explanation.streams} streams; evidence: {quoted('; '.join(explanation.sources))}",
        highlight=False,
    )
    if explanation.stalls:
        print_by_cause(explanation, console, title="Stall time by cause")
        hurt = Table(title="Most hurt streams", title_justify="left")
        hurt.add_column("stream", overflow="fold")  # whole on any terminal: folded, never cut
        for column in ("stalls", "stall time"):
            hurt.add_column(column, justify="right")
        hurt.add_column("mostly")
        for stream in explanation.hurt:
            hurt.add_row(
                plain(stream.stream_id),
                str(stream.stalls),
                format_duration(stream.time_s * 1e9),
                plain(stream.cause),
            )
        console.print(hurt)
    if stalls and explanation.stalls:
        longest = sorted(explanation.stalls, key=lambda s: -s.duration_s)[:stalls]
        table = Table(
            title=f"Stalls, longest first ({len(longest)} of {len(explanation.stalls)})",
            title_justify="left",
        )
        table.add_column("stream", overflow="fold")
        for column in ("at", "gap", "cause", "sure", "evidence"):
            table.add_column(column, justify="right" if column in ("at", "gap", "sure") else "left")
        for stall in longest:
            table.add_row(
                plain(stall.stream_id),
                "first token" if stall.first_token else format_duration(stall.start_ns),
                format_duration(stall.end_ns - stall.start_ns),
                plain(
                    "\n".join(f"{p.cause} {p.fraction:.0%}" for p in stall.parts)
                    if len(stall.parts) > 1
                    else stall.cause
                ),
                "\n".join(f"{p.confidence:.0%}" for p in stall.parts),
                plain(stall.evidence),
            )
        console.print(table)
    if scored is not None:
        print_score(scored, console)
    for note in notes:
        console.print(f"[bold]note:[/] {quoted(note)}", highlight=False)


def print_score(scored: Score, console: Console) -> None:
    said = scored.attributed_causes
    table = Table(
        title="Against the lab's ground truth: stall time, true cause (rows) x attributed",
        title_justify="left",
    )
    table.add_column("true \\ attributed")
    for cause in said:
        table.add_column(plain(cause), justify="right")
    for true in scored.true_causes:
        cells = []
        for cause in said:
            seconds = scored.seconds.get((true, cause))
            cell = "" if seconds is None else format_duration(seconds * 1e9)
            cells.append(f"[bold]{cell}[/]" if cell and cause == true else cell)
        table.add_row(plain(true), *cells)
    console.print(table)
    share = scored.share_right
    right = "—" if share is None else f"{share:.1%}"
    console.print(
        f"attributed right: {right} of {format_duration(scored.total_s * 1e9)} of stall time"
        + (
            f"; {scored.unmatched} stalls ({format_duration(scored.unmatched_s * 1e9)}) have no"
            " ground truth"
            if scored.unmatched
            else ""
        ),
        highlight=False,
    )


def to_json(explanation: Explanation, scored: Score | None, notes: list[str]) -> str:
    payload: dict[str, Any] = explanation.to_json()
    if scored is not None:
        payload["truth"] = scored.to_json()
    payload["notes"] = notes
    return orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode()
