"""``steadystream demo``: the whole story on loopback, with nothing to configure.

Starts the lab engine and the gateway, benches the lab directly and through the gateway with a
pacer, writes a report comparing the two, prints a short summary, and stops everything it
started. Every step is the command a user would run, so the demo doubles as a recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from steadystream._flags import Flag
from steadystream._validation import Duration
from steadystream.cli import app
from steadystream.cli._models import model_options

DEFAULT_PACER = "leaky"
CONCURRENCY = 12


@app.command()
@model_options
def demo(
    *,
    duration: Annotated[
        Duration,
        Field(default="80s", validate_default=True),  # shown as written
        Flag("Bench time in all, split between the direct and paced runs.", text=True),
    ],
    scenario: Annotated[
        str, Flag("Lab scenario (steadystream lab --list).", metavar="NAME")
    ] = "mixed",
    pacer: Annotated[
        str, Flag("Pacer for the run through the gateway.", metavar="SPEC")
    ] = DEFAULT_PACER,
    output: Annotated[Path, Flag("Report file.", names=("-o", "--output"))] = Path("report.html"),
    workdir: Annotated[Path, Flag("Where the runs and logs go.")] = Path("demo-run"),
    seed: Annotated[int, Flag("Seed of the lab and the load.")] = 1,
) -> None:
    """Lab + gateway + two benches + a report, on 127.0.0.1, stopped when done."""
    from steadystream.cli._console import console
    from steadystream.cli._demo_steps import DemoPlan, run_demo
    from steadystream.cli._errors import exit_on_error

    plan = DemoPlan(
        bench_ns=max(duration // 2, 2_000_000_000),
        scenario=scenario,
        pacer=pacer,
        report=output,
        workdir=workdir,
        seed=seed,
        concurrency=CONCURRENCY,
    )
    with exit_on_error():
        run_demo(plan, console())
