"""Errors turned into exits: one clear line on stderr and exit 2, never a traceback.

A bad option value is refused where the options are built (:mod:`steadystream.cli._models`);
what goes wrong later (a file that cannot be read, a spec that does not parse) is a
:class:`~steadystream.SteadystreamError`, printed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from steadystream._exceptions import SteadystreamError

__all__ = ["EXIT_USAGE", "exit_on_error", "print_error"]

EXIT_USAGE = 2  # unusable input: a bad file, option or configuration


@contextmanager
def exit_on_error() -> Iterator[None]:
    """Print a steadystream error as one clear line and exit 2, without a traceback."""
    try:
        yield
    except SteadystreamError as exc:
        print_error(str(exc))
        raise typer.Exit(EXIT_USAGE) from exc


def print_error(message: str) -> None:
    """``error: MESSAGE`` on stderr, one line however long (a pipe has no width to fit)."""
    from steadystream.cli._console import console, quoted

    # Quoted: a message may hold brackets ("pip install 'steadystream[ray]'", a path) that
    # rich would otherwise take for markup and drop, and text from outside (a server's error,
    # a file's line) whose control characters would drive the terminal.
    console(stderr=True).print(f"[bold red]error:[/] {quoted(message)}", highlight=False)
