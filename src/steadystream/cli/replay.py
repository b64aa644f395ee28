"""``steadystream replay``: play a recorded run back as a server in the lab's APIs (chat,
completions, the Responses API, Anthropic Messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import Field

from steadystream._flags import Flag
from steadystream._options import Inject, Only, TruthRecord
from steadystream._validation import Duration
from steadystream.cli import app
from steadystream.cli._groups import Listen
from steadystream.cli._models import model_options


@app.command()
@model_options
def replay(
    *,
    run: Annotated[Path, Flag("A recorded run (JSONL or Parquet).", argument=True)],
    inject: Inject,
    seed: Annotated[int, Flag("Same seed and request order: same draws.")] = 0,
    where: Annotated[
        str | None,
        Flag(
            "The vantage point to play (default: client, else the file's first).",
            metavar="WHERE",
        ),
    ] = None,
    only: Only,
    stall_limit: Annotated[
        Duration,
        Field(default="5m", validate_default=True),  # shown as written
        Flag("How long a stall:forever holds a stream before cutting it.", text=True),
    ],
    listen: Listen,
    record: TruthRecord,
) -> None:
    """Serve RUN's streams with their recorded timing and chunking, and the faults you inject.

    A request gets the stream its X-Replay-Stream header names, else the next in turn; what
    it was played is at /replay/requests/{id}.
    """
    from steadystream.bench.verdict import load_run
    from steadystream.cli._errors import exit_on_error
    from steadystream.cli._truth import truth_writer
    from steadystream.lab.truth import RequestTruth
    from steadystream.replay import create_app, parse_injection
    from steadystream.replay.server import serve

    with exit_on_error():
        injections = [parse_injection(spec) for spec in inject]
        loaded = load_run(run, required=False)  # (a note when its last line was cut off)
        timelines = loaded.timelines
        # fail here, with a clear message, rather than inside uvicorn
        create_app(timelines, injections=injections, seed=seed, where=where, only=only)
        writer = truth_writer(record)
    if loaded.note is not None:
        typer.echo(f"note: {loaded.note}")
    typer.echo(
        f"replay: {run} with {', '.join(i.spec for i in injections) or 'no injection'},"
        f" seed {seed}, at http://{listen.host}:{listen.port}/v1"
    )

    def on_done(truth: RequestTruth) -> None:
        if writer is not None:
            writer.write(truth.to_timeline())

    try:
        serve(
            timelines,
            host=listen.host,
            port=listen.port,
            injections=injections,
            seed=seed,
            where=where,
            only=only,
            stall_limit_ns=stall_limit,
            on_done=on_done,
        )
    finally:
        if writer is not None:
            writer.close()
