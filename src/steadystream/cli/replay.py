"""``steadystream replay``: play a recorded run back as an OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app


@app.command()
def replay(
    run: Annotated[Path, typer.Argument(help="A recorded run (JSONL or Parquet).")],
    inject: Annotated[
        list[str] | None,
        typer.Option(
            "--inject",
            "-i",
            metavar="FAULT",
            help="A fault to inject, e.g. pause:2s@50%, pause:1.5s@token=40, burst:30@start,"
            " jitter:20ms, stall:forever@60%, truncate@80% (repeatable).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Same seed and request order: same draws.")] = 0,
    where: Annotated[
        str | None,
        typer.Option(
            metavar="WHERE",
            help="The vantage point to play (default: client, else the file's first).",
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PATTERN",
            help="Play only the recorded streams whose id matches (steady-*; repeatable).",
        ),
    ] = None,
    stall_limit: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="How long a stall:forever holds a stream before cutting it."
        ),
    ] = "5m",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=0, max=65535)] = 8000,
) -> None:
    """Serve RUN's streams with their recorded timing and chunking, and the faults you inject.

    A request gets the stream its X-Replay-Stream header names, else the next in turn; what
    it was played is at /replay/requests/{id}.
    """
    from steadystream.cli._options import duration_ns, exit_on_error
    from steadystream.files import read_timelines
    from steadystream.replay import create_app, parse_injection
    from steadystream.replay.server import serve

    limit = duration_ns(stall_limit, "--stall-limit")
    with exit_on_error():
        injections = [parse_injection(spec) for spec in inject or []]
        timelines = read_timelines(run).timelines
        # fail here, with a clear message, rather than inside uvicorn
        create_app(timelines, injections=injections, seed=seed, where=where, only=only or ())
    typer.echo(
        f"replay: {run} with {', '.join(i.spec for i in injections) or 'no injection'},"
        f" seed {seed}, at http://{host}:{port}/v1"
    )
    serve(
        timelines,
        host=host,
        port=port,
        injections=injections,
        seed=seed,
        where=where,
        only=only or (),
        stall_limit_ns=limit,
    )
