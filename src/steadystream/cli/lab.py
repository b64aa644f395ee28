"""``steadystream lab``: serve the lab engine, a reproducible jitter lab with ground truth."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app


@app.command()
def lab(
    scenario: Annotated[
        str,
        typer.Option(
            "--scenario",
            "-s",
            metavar="NAME|FILE",
            help="A preset name or a scenario YAML file.",
        ),
    ] = "steady",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=0, max=65535)] = 8000,
    seed: Annotated[int, typer.Option(help="Same seed + scenario + arrivals: same pauses.")] = 0,
    record: Annotated[
        Path | None,
        typer.Option(help="Append each finished request's ground-truth timeline to this JSONL."),
    ] = None,
    keep_text: Annotated[
        bool, typer.Option(help="Store the generated text in the recorded timelines.")
    ] = False,
    list_presets: Annotated[
        bool, typer.Option("--list", help="List the built-in scenarios and exit.")
    ] = False,
) -> None:
    """An OpenAI-compatible server whose every pause has a known, recorded cause."""
    from steadystream.cli._options import exit_on_error
    from steadystream.lab.presets import preset_lines

    if list_presets:
        for line in preset_lines():
            typer.echo(line)
        return
    from steadystream.files import JsonlWriter
    from steadystream.lab.scenario_file import load_scenario
    from steadystream.lab.server import serve
    from steadystream.lab.truth import RequestTruth

    with exit_on_error():
        chosen = load_scenario(scenario)
        writer = JsonlWriter(record, keep_text=keep_text, append=True) if record else None
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
