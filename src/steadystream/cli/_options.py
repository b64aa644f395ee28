"""Option parsing shared by commands: durations, and errors turned into clean exits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from steadystream._exceptions import SteadystreamError

__all__ = ["duration_ns", "exit_on_error"]

EXIT_USAGE = 2  # unusable input: a bad file, option or configuration


def duration_ns(value: str, name: str) -> int:
    """Parse a duration option (``400ms``, ``1.5s``) or exit naming the option."""
    from steadystream._units import parse_duration

    try:
        return parse_duration(value, name=name)
    except SteadystreamError as exc:
        raise typer.BadParameter(str(exc), param_hint=name) from exc


@contextmanager
def exit_on_error() -> Iterator[None]:
    """Print a steadystream error as one clear line and exit 2, without a traceback."""
    try:
        yield
    except SteadystreamError as exc:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from exc
