"""``steadystream explain``: the cause of every stall, and how right it is against the lab."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import Field

from steadystream._flags import Flag
from steadystream._options import FileFormat, JsonOutput, StallThreshold, TimelineFiles, Worst
from steadystream.cli import app
from steadystream.cli._groups import FilesOnRay
from steadystream.cli._models import model_options

if TYPE_CHECKING:
    from steadystream.attribution import Explanation


@app.command()
@model_options
def explain(
    *,
    files: TimelineFiles,
    file_format: FileFormat,
    engine_metrics: Annotated[
        Path | None,
        Flag(
            "Engine metrics scraped during the run (default: RUN.engine-metrics.jsonl"
            " next to the first file, when there is one)."
        ),
    ] = None,
    stall_threshold: StallThreshold,
    truth: Annotated[
        tuple[Path, ...], Flag("Lab ground truth (lab --record FILE): score the attribution.")
    ] = (),
    stalls: Annotated[int, Field(ge=0), Flag("How many stalls to list, longest first.")] = 20,
    worst: Worst,
    json_output: JsonOutput,
    prometheus: Annotated[
        Path | None,
        Flag(
            "Also write stall time and stalls by cause to this Prometheus text file (for"
            " node_exporter's textfile collector: name it *.prom)."
        ),
    ] = None,
    ray: FilesOnRay,
) -> None:
    """Every stall's cause (or unknown), how sure, and why; stall time by cause; mitigations.

    With the OTEL_* environment set (OTEL_EXPORTER_OTLP_ENDPOINT), stall time by cause also
    goes out over OTLP as the counter steadystream.stall.time."""
    from steadystream.analysis import timeline_files
    from steadystream.attribution import explain as attribute
    from steadystream.attribution import score
    from steadystream.bench.verdict import load_files
    from steadystream.cli import _explain_view
    from steadystream.cli._errors import exit_on_error
    from steadystream.cli._inputs import read_engine_beside

    if ray.on_ray and file_format != "auto":
        raise typer.BadParameter(
            "on Ray each file's format is found from its content: leave --format out",
            param_hint="--format",
        )
    with exit_on_error():
        path_notes: list[str] = []
        paths = timeline_files(files, path_notes)
        if prometheus is not None:
            _not_an_input(
                prometheus, [*paths, *truth, *([engine_metrics] if engine_metrics else [])]
            )
        if ray.on_ray:
            from steadystream.explanations import explain_files

            engine_notes: list[str] = []
            engine = read_engine_beside(paths, engine_metrics, engine_notes)
            on_ray = explain_files(
                paths,
                stall_threshold_ns=stall_threshold,
                engine=engine,
                worst=worst,
                address=ray.ray_address,
            )
            assert on_ray.explanation is not None  # asked without a table: always explained
            explanation, notes = on_ray.explanation, path_notes + on_ray.notes + engine_notes
            notes += explanation.notes  # (what the engine metrics did not cover, say)
        else:
            fmt = None if file_format == "auto" else file_format
            timelines, numbers, notes = load_files(paths, format=fmt)
            notes[:0] = path_notes
            engine = read_engine_beside(paths, engine_metrics, notes)
            explanation = attribute(
                timelines,
                stall_threshold_ns=stall_threshold,
                engine=engine,
                worst=worst,
                files=numbers,
            )
            notes += explanation.notes
        scored = None
        if truth:
            truths, truth_files, truth_notes = load_files(truth)
            notes += truth_notes
            scored = score(explanation, truths, files=truth_files, paths=truth)
        _export(explanation, prometheus, os.environ, notes)
    if json_output:
        typer.echo(_explain_view.to_json(explanation, scored, notes))
    else:
        _explain_view.print_explanation(explanation, scored, notes, stalls=stalls)


def _not_an_input(prometheus: Path, inputs: list[Path]) -> None:
    """Refuse a ``--prometheus`` file that is one of the files read: it would be replaced."""
    from steadystream._exceptions import InputError
    from steadystream.cli._outputs import is_one_of
    from steadystream.engine_metrics import sidecar_path

    read = [*inputs, *(sidecar_path(p) for p in inputs[:1])]  # (the engine metrics beside)
    if prometheus.is_file() and is_one_of(prometheus, read):
        raise InputError(f"--prometheus: {str(prometheus)!r} is a file explain reads")


def _export(
    explanation: Explanation, prometheus: Path | None, env: Mapping[str, str], notes: list[str]
) -> None:
    """Stall time by cause to the Prometheus file asked for, and over OTLP when it is on."""
    from steadystream.attribution.export import stall_totals
    from steadystream.cli._explain_export import export_otel, write_prometheus

    totals = stall_totals(explanation)
    if prometheus is not None:
        write_prometheus(prometheus, totals)
        notes.append(f"stall time by cause written to {prometheus} (Prometheus text format)")
    if export_otel(env, totals):
        notes.append("stall time by cause sent over OTLP (steadystream.stall.time)")
