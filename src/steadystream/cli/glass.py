"""``steadystream glass``: a page in headless Chromium over replayed streams, at the glass."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import AfterValidator, Field

from steadystream._flags import Flag
from steadystream._options import Inject, Only
from steadystream._validation import Duration
from steadystream.cli import app
from steadystream.cli._models import model_options

_DAY_NS = 86_400 * 10**9


def _deadline(ns: int) -> int:
    # Playwright reads a timeout of 0 as none, and one past 2**31 - 1 ms (24.8 days) as 1 ms.
    if not 0 < ns <= _DAY_NS:
        raise ValueError("must be above zero and at most 24h")
    return ns


@app.command()
@model_options
def glass(
    *,
    page: Annotated[
        str, Flag("The chat page: a file path or an http(s) URL (docs/glass.md).", argument=True)
    ],
    replay_run: Annotated[
        Path, Flag("The recorded run to replay into the page.", names=("--replay",))
    ],
    inject: Inject,
    only: Only,
    runs: Annotated[int, Field(ge=1, le=10_000), Flag("Requests the page makes.")] = 10,
    seed: Annotated[int, Flag("Seed of the injections' draws.")] = 0,
    output: Annotated[
        Path,
        Flag("Where the timelines go (JSONL or Parquet).", names=("--output", "-o")),
    ] = Path("glass.jsonl"),
    timeout: Annotated[
        Duration,
        AfterValidator(_deadline),
        Field(default="2m", validate_default=True),  # shown as written
        Flag("Deadline of each run (page load, answer and report), up to 24h.", text=True),
    ],
) -> None:
    """Replay RUN into PAGE in headless Chromium; record its arrivals and paints per token.

    The output holds, per run, the page's arrivals (where=client), its paints (where=glass)
    and what the replay wrote (where=replay): `steadystream analyze` and `report` show the
    client and glass edges side by side.
    """
    import asyncio

    from steadystream._exceptions import InputError
    from steadystream.cli import _console
    from steadystream.cli._errors import exit_on_error
    from steadystream.files import read_timelines, write_timelines
    from steadystream.glass.harness import GlassError, drive_page
    from steadystream.replay import ReplayServer, parse_injection
    from steadystream.report import find_chromium

    console = _console.console(stderr=True)
    timeout_s = timeout / 1e9
    with exit_on_error():
        _check_output(output, replay_run)  # (before the runs, which may take minutes)
        injections = [parse_injection(spec) for spec in inject]
        timelines = read_timelines(replay_run).timelines
        chromium = find_chromium()
        if chromium is None:
            raise GlassError(
                "no Chromium found: install it (Debian/Ubuntu: apt-get install chromium)"
                " or set STEADYSTREAM_CHROMIUM to its path"
            )
        server = ReplayServer(timelines, injections=injections, seed=seed, only=only)
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
        try:
            write_timelines(output, result.timelines)
        except OSError as exc:  # (a full disk, a folder removed while the runs went)
            raise InputError(f"cannot write {output}: {exc.strerror or exc}") from exc
    done = runs - len(result.failures)
    console.print(f"{done}/{runs} runs recorded to {output}", highlight=False)
    if result.failures:
        raise typer.Exit(1)


def _check_output(output: Path, replay_run: Path) -> None:
    """Refuse an output the timelines cannot be written to, or that is the recorded run
    replayed (it would be replaced by the glass runs)."""
    from steadystream._exceptions import InputError
    from steadystream.cli._outputs import timeline_output_problem

    problem = timeline_output_problem(output, [replay_run], "the recorded run replayed here")
    if problem is not None:
        raise InputError(f"--output {output}: {problem}")
