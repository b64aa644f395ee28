"""``steadystream report``: one self-contained HTML report of a run, and its chart images."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream._flags import Flag
from steadystream._options import FileFormat
from steadystream.cli import app
from steadystream.cli._groups import MetricSettings
from steadystream.cli._models import model_options

DEFAULT_OUTPUT = Path("report.html")


@app.command()
@model_options
def report(
    *,
    files: Annotated[
        list[Path], Flag("Timeline files of the run (.jsonl, .jsonl.gz, .parquet).", argument=True)
    ],
    file_format: FileFormat,
    output: Annotated[
        Path | None,
        Flag(
            "The HTML file to write (default: report.html, which is never overwritten"
            " without --force).",
            names=("--output", "-o"),
        ),
    ] = None,
    force: Annotated[
        bool, Flag("Overwrite report.html when -o is not given.", names=("--force",))
    ] = False,
    baseline: Annotated[
        tuple[Path, ...],
        Flag("A run to compare with (repeat for several files).", names=("--baseline",)),
    ] = (),
    whatif: Annotated[
        tuple[str, ...],
        Flag(
            "A pacer spec to simulate over the run, e.g. leaky:interval=33ms (repeatable);"
            " the report gets a what-if table.",
            names=("--whatif",),
            metavar="SPEC",
        ),
    ] = (),
    images: Annotated[
        Path | None,
        Flag("Also write every chart as PNG and SVG here (needs Chromium).", names=("--images",)),
    ] = None,
    title: Annotated[str | None, Flag("The report's title.")] = None,
    metrics: MetricSettings,
) -> None:
    """An HTML report that works offline: headline cards, findings, ITL band, stall map."""
    from steadystream._exceptions import InputError
    from steadystream.bench.verdict import load_files
    from steadystream.cli._errors import exit_on_error
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
    problem = _unwritable(output, [*files, *baseline])
    if problem is not None:  # (said before the inputs are read: they may take a while)
        raise typer.BadParameter(f"{output}: {problem}", param_hint="--output")
    if images is not None and images.exists() and not images.is_dir():
        raise typer.BadParameter(
            f"{images}: not a folder; name the folder to write the images in",
            param_hint="--images",
        )
    config = metrics.metric_config()
    with exit_on_error():
        fmt = None if file_format == "auto" else file_format
        timelines, file_of, notes = load_files(files, format=fmt)
        engine = read_engine_beside(files, None, [])
        base, base_file_of, base_notes = (
            load_files(baseline, format=fmt) if baseline else (None, None, [])
        )
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
            baseline_sources=[p.name for p in baseline],
            notes=notes + base_notes,
            engine=engine,
            files=file_of,
            baseline_files=base_file_of,
        )
        try:
            size = write_report(built, output)
        except OSError as exc:  # (a full disk: the report that was there stays whole)
            raise InputError(f"cannot write {output}: {exc.strerror or exc}") from exc
        typer.echo(
            f"wrote {output} ({size / 1e6:.1f} MB): {built.fleet.streams:,} streams,"
            f" {len(built.charts)} charts, {len(built.findings)} findings"
        )
        if images is not None:
            from steadystream.report.images import write_images

            try:
                written = write_images(built, images)
            except OSError as exc:  # (the report is written; the images could not be)
                raise InputError(
                    f"--images: cannot write in {images}: {exc.strerror or exc}"
                ) from exc
            typer.echo(f"wrote {len(written)} images to {images}")


def _unwritable(output: Path, inputs: list[Path]) -> str | None:
    """Why the report cannot be written to ``output``, or None."""
    from steadystream.cli._outputs import is_one_of
    from steadystream.engine_metrics import sidecar_path

    read = [*inputs, *(sidecar_path(p) for p in inputs[:1])]  # (the engine metrics beside)
    if output.is_file() and is_one_of(output, read):
        return "that is a file the report reads; name another file"
    if output.is_dir():
        return "a folder; name the report's file"
    if output.exists() and not output.is_file():
        return "not a regular file (a FIFO would hang the write)"
    if not output.parent.is_dir():
        return f"its folder {output.parent} does not exist"
    return None
