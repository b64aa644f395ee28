"""``steadystream whatif``: what each pacer would have done to recorded traffic."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steadystream._flags import Flag
from steadystream._options import FileFormat, JsonOutput
from steadystream._validation import Duration
from steadystream.cli import app
from steadystream.cli._groups import Thresholds
from steadystream.cli._models import model_options

if TYPE_CHECKING:
    from rich.console import Console

    from steadystream.shaping.whatif import WhatIf

_TIMELINE_SUFFIXES = (".jsonl.gz", ".jsonl", ".parquet")


@app.command()
@model_options
def whatif(
    *,
    files: Annotated[
        list[Path], Flag("Recorded runs (.jsonl, .jsonl.gz, .parquet).", argument=True)
    ],
    file_format: FileFormat,
    pacer: Annotated[
        tuple[str, ...],
        Flag(
            "A pacer spec, e.g. leaky:interval=33ms,capacity=8 (repeat to compare; "
            "default: every pacer with its defaults).",
            names=("--pacer", "-p"),
            metavar="SPEC",
        ),
    ] = (),
    max_added_ttft: Annotated[
        Duration | None,
        Flag("Only a pacer whose added TTFT p99 stays within this can be best.", text=True),
    ] = None,
    thresholds: Thresholds,
    output: Annotated[
        Path | None,
        Flag(
            "Write the paced timelines here (with several pacers, one file each: "
            "NAME.1-leaky.jsonl, NAME.2-adaptive.jsonl, ...).",
            names=("--output", "-o"),
        ),
    ] = None,
    json_output: JsonOutput,
) -> None:
    """Simulate pacers over every recorded stream: latency added, stutter removed, best pick."""
    from steadystream._exceptions import InputError
    from steadystream.bench.verdict import load_runs
    from steadystream.cli._errors import exit_on_error
    from steadystream.files import write_timelines
    from steadystream.shaping import PACERS, parse_spec
    from steadystream.shaping.whatif import what_if

    specs = pacer or [name for name in PACERS if name != "passthrough"]
    with exit_on_error():
        pacers = [parse_spec(spec) for spec in specs]
        targets: list[Path] = []
        if output is not None:
            names = [p.name for p in pacers]
            targets = [output] if len(names) == 1 else _numbered_all(output, names)
            # (said before the inputs are read and simulated: that may take a while)
            _check_targets(targets, files)
        fmt = None if file_format == "auto" else file_format
        # (with a note for a file whose last line was cut off: its complete streams count)
        timelines, notes = load_runs(files, format=fmt)
        result = what_if(
            timelines,
            pacers,
            config=thresholds.metric_config(),
            max_added_ttft_ns=max_added_ttft,
            keep_timelines=output is not None,
        )
        written = []
        if output is not None:
            keep_text = any(t.texts is not None for t in timelines)
            for path, outcome in zip(targets, result.pacers, strict=True):
                try:
                    write_timelines(path, outcome.timelines, keep_text=keep_text)
                except OSError as exc:  # a full disk, no permission
                    raise InputError(f"cannot write {path}: {exc.strerror or exc}") from exc
                written.append(str(path))
    if json_output:
        import orjson

        data = result.to_dict()
        data["written"] = written
        data["notes"] = notes
        typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return
    from steadystream.cli._console import console as stdout_console
    from steadystream.cli._console import quoted

    console = stdout_console()
    for note in notes:
        console.print(f"note: {quoted(note)}", highlight=False)
    print_whatif(result, console)
    for name in written:
        console.print(f"paced timelines written to {name}", highlight=False)


def _numbered_all(output: Path, names: list[str]) -> list[Path]:
    return [_numbered(output, index, name) for index, name in enumerate(names, start=1)]


def _check_targets(targets: list[Path], inputs: list[Path]) -> None:
    """Refuse an output the paced timelines cannot be written to, or that would replace a
    recorded run read here (the recording would be lost, replaced by its paced copy)."""
    from steadystream._exceptions import InputError
    from steadystream.cli._outputs import timeline_output_problem

    for target in targets:
        problem = timeline_output_problem(target, inputs, "one of the recorded runs read here")
        if problem is not None:
            raise InputError(f"--output {target}: {problem}")


def _numbered(output: Path, index: int, name: str) -> Path:
    """``run.jsonl`` -> ``run.2-leaky.jsonl`` (the suffix kept so the format is kept)."""
    text = output.name
    suffix = next((s for s in _TIMELINE_SUFFIXES if text.endswith(s)), output.suffix)
    stem = text[: len(text) - len(suffix)] if suffix else text
    return output.with_name(f"{stem}.{index}-{name}{suffix}")


def print_whatif(result: WhatIf, console: Console) -> None:
    """The comparison: one column for the run as recorded and one per pacer, best marked."""
    from rich import box
    from rich.table import Table

    limit = result.max_added_ttft_ns
    table = Table(
        title=f"What if these pacers had run? ({result.streams} streams)",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
    )
    table.add_column("")
    table.add_column("recorded", justify="right", style="dim")
    for index, outcome in enumerate(result.pacers, start=1):
        name = outcome.spec.partition(":")[0]
        best = index - 1 == result.best
        table.add_column(
            f"{index}{'*' if best else ''}\n{name}",
            justify="right",
            style="bold green" if best else (None if outcome.within_limit else "dim"),
        )
    from steadystream._units import format_seconds
    from steadystream.metrics import FLEET_CATALOGUE

    before = result.before
    outcomes = result.pacers

    def fleet_row(name: str) -> tuple[str, str, list[str]]:
        info = FLEET_CATALOGUE[name]
        after = [info.show(getattr(o.after, name), narrow=True) for o in outcomes]
        return info.header, info.show(getattr(before, name), narrow=True), after

    def added(label: str, values: list[float | None]) -> tuple[str, str, list[str]]:
        return label, "", [format_seconds(v, narrow=True) for v in values]

    rows = [
        added("TTFT+ p50", [o.added_ttft_p50_s for o in outcomes]),
        added("TTFT+ p99", [o.added_ttft_p99_s for o in outcomes]),
        fleet_row("p99_of_p99_s"),
        fleet_row("p99_of_worst_gap_s"),
        fleet_row("stall_count"),
        fleet_row("goodput"),
        added("tail p99", [o.tail_delay_p99_s for o in outcomes]),
        fleet_row("ttft_p99_s"),
        fleet_row("qoe_mean"),
        fleet_row("fluidity_mean"),
    ]
    for label, recorded, values in rows:
        table.add_row(label, recorded, *values)
    console.print(table)
    for index, outcome in enumerate(outcomes, start=1):
        note = ""
        if index - 1 == result.best:
            note = "  (best)"
        elif not outcome.within_limit:
            note = "  (adds more TTFT than allowed)"
        console.print(f"{index}  {outcome.spec}{note}", highlight=False)
    threshold = format_seconds(result.config.stall_threshold_ns / 1e9, narrow=True)
    console.print(
        "TTFT+: time to first token added; tail: how long the end of the answer was held "
        "back (both per stream). p99 gap, p99: p99 of the per-stream p99 gaps; worst gap, "
        f"p99: p99 of the per-stream worst gaps; stalls: gaps above {threshold}.",
        highlight=False,
    )
    rule = "best: fewest stalls, then lowest worst gap, p99 gap, tail p99"
    if limit is not None:
        rule += (
            f"; only pacers adding at most {format_seconds(limit / 1e9, narrow=True)} TTFT at p99"
        )
    if result.best is None:
        rule += " (none qualifies)"
    console.print(rule, highlight=False)
