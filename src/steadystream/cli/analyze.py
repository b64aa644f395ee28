"""``steadystream analyze``: fleet metrics and the worst streams of recorded runs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated

import typer

from steadystream._flags import Flag
from steadystream._options import FileFormat, JsonOutput, TimelineFiles, Worst
from steadystream.cli import app
from steadystream.cli._groups import FilesOnRay, MetricSettings
from steadystream.cli._models import model_options

MAX_BY_GROUPS = 100
"""The most groups ``--by`` breaks a fleet into: each is a column of the table, and costs a
pass over the run (a label with a value per stream would take hours, and print a table no
one can read)."""


@app.command()
@model_options
def analyze(
    *,
    files: TimelineFiles,
    file_format: FileFormat,
    by: Annotated[
        str | None,
        Flag(
            "Break the fleet down by a label: model, route or tenant.",
            metavar="model|route|tenant",
        ),
    ] = None,
    metrics: MetricSettings,
    worst: Worst,
    json_output: JsonOutput,
    ray: FilesOnRay,
    no_explain: Annotated[
        bool,
        Flag(
            "Metrics only: leave the stalls' causes out (explain tells them).",
            names=("--no-explain",),
        ),
    ] = False,
) -> None:
    """Per-stream jitter and fleet metrics: p99-of-p99, worst gaps, ITL goodput, TTFT."""
    from steadystream.analysis import timeline_files
    from steadystream.bench.summary import summarise, summarise_table
    from steadystream.bench.verdict import load_files
    from steadystream.cli import _render
    from steadystream.cli._errors import exit_on_error
    from steadystream.cli._inputs import read_engine_beside
    from steadystream.metrics import LABEL_DIMENSIONS

    if by is not None and by not in LABEL_DIMENSIONS:
        raise typer.BadParameter(f"must be one of {', '.join(LABEL_DIMENSIONS)}", param_hint="--by")
    config = metrics.metric_config()
    if ray.on_ray and file_format != "auto":
        raise typer.BadParameter(
            "on Ray each file's format is found from its content: leave --format out",
            param_hint="--format",
        )
    with exit_on_error():
        path_notes: list[str] = []
        paths = timeline_files(files, path_notes)
        if ray.on_ray:
            from steadystream.explanations import explain_files

            # A Ray task per file returns its per-stream rows, and its streams' clocks for
            # the stalls' causes, which a second round of tasks attributes (explain_files).
            engine_notes: list[str] = []
            engine = None if no_explain else read_engine_beside(paths, None, engine_notes)
            on_ray = explain_files(
                paths,
                stall_threshold_ns=config.stall_threshold_ns,
                engine=engine,
                config=config,
                address=ray.ray_address,
                attribute=not no_explain,
            )
            assert on_ray.tables is not None  # asked for with config
            _check_groups(on_ray.tables.table.labels, by)
            summary = summarise_table(
                on_ray.tables.table,
                config,
                by=by,
                worst=worst,
                explanation=on_ray.explanation,
                files=on_ray.tables.file_numbers(),
            )
            notes = on_ray.notes + engine_notes
        else:
            fmt = None if file_format == "auto" else file_format
            timelines, numbers, notes = load_files(paths, format=fmt)
            _check_groups((t.labels for t in timelines), by)
            # (Only the stalls' causes read the engine's metrics: without them, a sidecar
            # that cannot be read stops nothing.)
            engine = None if no_explain else read_engine_beside(paths, None, notes)
            summary = summarise(
                timelines,
                config,
                by=by,
                worst=worst,
                engine=engine,
                files=numbers,
                attribute=not no_explain,
            )
    summary.notes[:0] = path_notes + notes
    if summary.explanation is not None:  # (engine metrics that covered no stall, say)
        summary.notes += summary.explanation.notes
    if len(paths) > 1:
        summary.notes.append(f"{len(paths)} files, {summary.fleet.streams} streams merged")
    if json_output:
        typer.echo(_render.to_json(summary))
    else:
        _render.print_summary(summary)


def _check_groups(labels: Iterable[Mapping[str, str]], by: str | None) -> None:
    """Refuse a ``--by`` label with more values than :data:`MAX_BY_GROUPS`."""
    if by is None:
        return
    values = {label.get(by, "") for label in labels}
    if len(values) > MAX_BY_GROUPS:
        from steadystream._exceptions import InputError

        raise InputError(
            f"--by {by}: the streams hold {len(values):,} values of {by}; --by breaks the fleet"
            f" into at most {MAX_BY_GROUPS} groups (the fleet's ttft_by shows TTFT for the"
            f" {MAX_BY_GROUPS} values with the most streams)"
        )
