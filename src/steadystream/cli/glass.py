"""``steadystream glass``: a page in headless Chromium over replayed streams, at the glass."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app


@app.command()
def glass(
    page: Annotated[
        str, typer.Argument(help="The chat page: a file path or an http(s) URL (docs/glass.md).")
    ],
    replay_run: Annotated[
        Path, typer.Option("--replay", help="The recorded run to replay into the page.")
    ],
    inject: Annotated[
        list[str] | None,
        typer.Option(
            "--inject",
            "-i",
            metavar="FAULT",
            help="A fault to inject (as for `replay`; repeatable).",
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PATTERN",
            help="Replay only the recorded streams whose id matches (repeatable).",
        ),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, max=10_000, help="Requests the page makes.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the injections' draws.")] = 0,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where the timelines go (JSONL or Parquet).")
    ] = Path("glass.jsonl"),
    timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="Deadline of each run (page load, answer and report)."
        ),
    ] = "2m",
) -> None:
    """Replay RUN into PAGE in headless Chromium; record its arrivals and paints per token.

    The output holds, per run, the page's arrivals (where=client), its paints (where=glass)
    and what the replay wrote (where=replay): `steadystream analyze` and `report` show the
    client and glass edges side by side.
    """
    import asyncio

    from steadystream.cli import _console
    from steadystream.cli._options import duration_ns, exit_on_error
    from steadystream.files import read_timelines, write_timelines
    from steadystream.glass.harness import GlassError, drive_page
    from steadystream.replay import ReplayServer, parse_injection
    from steadystream.report import find_chromium

    console = _console.console(stderr=True)
    timeout_s = duration_ns(timeout, "--timeout") / 1e9
    with exit_on_error():
        injections = [parse_injection(spec) for spec in inject or []]
        timelines = read_timelines(replay_run).timelines
        chromium = find_chromium()
        if chromium is None:
            raise GlassError(
                "no Chromium found: install it (Debian/Ubuntu: apt-get install chromium)"
                " or set STEADYSTREAM_CHROMIUM to its path"
            )
        server = ReplayServer(timelines, injections=injections, seed=seed, only=only or ())
        with server:

            def progress(run: int, error: str | None) -> None:
                console.print(f"run {run + 1}/{runs}: {error or 'ok'}", highlight=False)

            result = asyncio.run(
                drive_page(
                    page,
                    server,
                    runs=runs,
                    chromium=chromium,
                    timeout_s=timeout_s,
                    on_run=progress,
                )
            )
        write_timelines(output, result.timelines)
    done = runs - len(result.failures)
    console.print(f"{done}/{runs} runs recorded to {output}", highlight=False)
    if result.failures:
        raise typer.Exit(1)
