"""``steadystream demo``: the whole story on loopback, with nothing to configure.

Starts the lab engine and the gateway, benches the lab directly and through the gateway with a
pacer, writes a report comparing the two, prints a short summary, and stops everything it
started. Every step is the command a user would run, so the demo doubles as a recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app
from steadystream.cli._options import duration_ns, exit_on_error

DEFAULT_PACER = "leaky"
CONCURRENCY = 12


@app.command()
def demo(
    duration: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="Bench time in all, split between the direct and paced runs.",
        ),
    ] = "80s",
    scenario: Annotated[
        str, typer.Option(metavar="NAME", help="Lab scenario (steadystream lab --list).")
    ] = "mixed",
    pacer: Annotated[
        str, typer.Option(metavar="SPEC", help="Pacer for the run through the gateway.")
    ] = DEFAULT_PACER,
    output: Annotated[Path, typer.Option("-o", "--output", help="Report file.")] = Path(
        "report.html"
    ),
    workdir: Annotated[Path, typer.Option(help="Where the runs and logs go.")] = Path("demo-run"),
    seed: Annotated[int, typer.Option(help="Seed of the lab and the load.")] = 1,
) -> None:
    """Lab + gateway + two benches + a report, on 127.0.0.1, stopped when done."""
    from steadystream.cli._console import console
    from steadystream.cli._demo_steps import DemoPlan, run_demo

    total_ns = duration_ns(duration, "--duration")
    plan = DemoPlan(
        bench_ns=max(total_ns // 2, 2_000_000_000),
        scenario=scenario,
        pacer=pacer,
        report=output,
        workdir=workdir,
        seed=seed,
        concurrency=CONCURRENCY,
    )
    with exit_on_error():
        run_demo(plan, console())
