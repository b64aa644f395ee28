"""``steadystream bench``: load an OpenAI-compatible endpoint and record every stream.

The options are :class:`~steadystream.bench.config.BenchConfig`'s fields, each with its
:class:`~steadystream._flags.Flag`, laid out by :mod:`steadystream.cli._models` as every
command's are; this module adds only what is about showing (``--live``, ``--json``). The work
is in ``_bench_run``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from steadystream._flags import Flag, Panel
from steadystream._options import JsonOutput
from steadystream.bench.config import OUTPUT, BenchConfig
from steadystream.cli import app
from steadystream.cli._models import model_options

__all__ = ["bench"]


@app.command()
@model_options
def bench(
    *,
    config: BenchConfig,
    live: Annotated[bool, Flag("Show the live view (on a terminal).", OUTPUT)] = True,
    json_output: Annotated[JsonOutput, Panel(OUTPUT)],
) -> None:
    """Load an endpoint, record every stream's timeline, and summarise the jitter.

    Exit codes: 0 done; 1 the gate failed or no sweep load met the SLO; 2 unusable input;
    3 no stream succeeded, or the server could not be reached; 4 the gate had too few streams
    to judge; 130 interrupted (what finished is kept).
    """
    from steadystream.cli._bench_run import execute

    code = execute(config, live=live, json_output=json_output)
    if code:
        raise typer.Exit(code)
