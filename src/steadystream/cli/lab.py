"""``steadystream lab``: serve the lab engine, a reproducible jitter lab with ground truth."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import Field

from steadystream._flags import Flag
from steadystream._options import KeepText, TruthRecord
from steadystream.cli import app
from steadystream.cli._groups import Listen
from steadystream.cli._models import model_options


@app.command()
@model_options
def lab(
    *,
    scenario: Annotated[
        str,
        Flag(
            "A preset name or a scenario YAML file.",
            names=("--scenario", "-s"),
            metavar="NAME|FILE",
        ),
    ] = "steady",
    listen: Listen,
    seed: Annotated[int, Field(ge=0), Flag("Same seed + scenario + arrivals: same pauses.")] = 0,
    record: TruthRecord,
    keep_text: KeepText,
    list_presets: Annotated[
        bool, Flag("List the built-in scenarios and exit.", names=("--list",))
    ] = False,
) -> None:
    """A chat, Responses and Messages server whose every pause has a known, recorded cause."""
    from steadystream.cli._errors import exit_on_error
    from steadystream.lab.presets import preset_lines

    if list_presets:
        for line in preset_lines():
            typer.echo(line)
        return
    from steadystream.cli._truth import truth_writer
    from steadystream.lab.scenario_file import load_scenario
    from steadystream.lab.server import serve
    from steadystream.lab.truth import RequestTruth

    with exit_on_error():
        chosen = load_scenario(scenario)
        writer = truth_writer(record, keep_text=keep_text)
    host, port = listen.host, listen.port
    typer.echo(
        f"lab: scenario {chosen.name!r}, seed {seed}, models {', '.join(chosen.server.models)} "
        f"at http://{host}:{port}/v1" + (f", recording to {record}" if record else "")
    )

    def on_done(truth: RequestTruth) -> None:
        if writer is not None:
            writer.write(truth.to_timeline(keep_text=keep_text))

    try:
        serve(chosen, host=host, port=port, seed=seed, on_done=on_done)
    finally:
        if writer is not None:
            writer.close()
