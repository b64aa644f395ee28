"""``steadystream report``: one self-contained HTML report of a run, and its chart images."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app
from steadystream.cli._options import (
    FluidityDeadline,
    FluidityFirstDeadline,
    FluidityForm,
    QoeExpectedTtft,
    QoeForm,
    QoePace,
    StallThreshold,
    TtftTarget,
    exit_on_error,
    metric_config,
)

DEFAULT_OUTPUT = Path("report.html")


@app.command()
def report(
    files: Annotated[
        list[Path], typer.Argument(help="Timeline files of the run (.jsonl, .jsonl.gz, .parquet).")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The HTML file to write (default: report.html, which is never overwritten"
            " without --force).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite report.html when -o is not given.")
    ] = False,
    baseline: Annotated[
        list[Path] | None,
        typer.Option("--baseline", help="A run to compare with (repeat for several files)."),
    ] = None,
    whatif: Annotated[
        list[str] | None,
        typer.Option(
            "--whatif",
            metavar="SPEC",
            help="A pacer spec to simulate over the run, e.g. leaky:interval=33ms (repeatable);"
            " the report gets a what-if table.",
        ),
    ] = None,
    images: Annotated[
        Path | None,
        typer.Option(
            "--images", help="Also write every chart as PNG and SVG here (needs Chromium)."
        ),
    ] = None,
    title: Annotated[str | None, typer.Option(help="The report's title.")] = None,
    stall_threshold: StallThreshold = "400ms",
    ttft_target: TtftTarget = "800ms",
    qoe_expected_ttft: QoeExpectedTtft = "1s",
    qoe_pace: QoePace = "100ms",
    qoe_form: QoeForm = "exact",
    fluidity_first_deadline: FluidityFirstDeadline = "100ms",
    fluidity_deadline: FluidityDeadline = "50ms",
    fluidity_form: FluidityForm = "documented",
) -> None:
    """An HTML report that works offline: headline cards, findings, ITL band, stall map."""
    from steadystream.bench.verdict import load_files
    from steadystream.cli._inputs import read_engine_beside
    from steadystream.report import build_report, write_report

    if output is None:
        # A name the user did not choose is not theirs to lose: the report of an earlier
        # run stays unless they say so (a new name each time would leave them guessing which
        # file is the latest, and scripts without a path to open).
        output = DEFAULT_OUTPUT
        if output.exists() and not force:
            raise typer.BadParameter(
                f"{output} exists: name another file with -o FILE, or overwrite it with --force",
                param_hint="--output",
            )
    config = metric_config(
        stall_threshold=stall_threshold,
        ttft_target=ttft_target,
        qoe_expected_ttft=qoe_expected_ttft,
        qoe_pace=qoe_pace,
        qoe_form=qoe_form,
        fluidity_first_deadline=fluidity_first_deadline,
        fluidity_deadline=fluidity_deadline,
        fluidity_form=fluidity_form,
    )
    with exit_on_error():
        timelines, file_of, notes = load_files(files)
        engine = read_engine_beside(files, None, [])
        base, base_file_of, base_notes = load_files(baseline) if baseline else (None, None, [])
        comparison = None
        if whatif:
            from steadystream.shaping import parse_spec
            from steadystream.shaping.whatif import what_if

            pacers = [parse_spec(spec) for spec in whatif]
            comparison = what_if(timelines, pacers, config=config)
        built = build_report(
            timelines,
            config=config,
            baseline=base,
            whatif=comparison,
            title=title or f"Stream report: {', '.join(p.name for p in files)}",
            sources=[p.name for p in files],
            baseline_sources=[p.name for p in baseline or []],
            notes=notes + base_notes,
            engine=engine,
            files=file_of,
            baseline_files=base_file_of,
        )
        size = write_report(built, output)
        typer.echo(
            f"wrote {output} ({size / 1e6:.1f} MB): {built.fleet.streams:,} streams,"
            f" {len(built.charts)} charts, {len(built.findings)} findings"
        )
        if images is not None:
            from steadystream.report.images import write_images

            written = write_images(built, images)
            typer.echo(f"wrote {len(written)} images to {images}")
