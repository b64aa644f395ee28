"""The ``steadystream`` command: one module per command, each importing its heavy parts lazily.

Every command's options are pydantic fields (:mod:`steadystream.cli._models`); those several
commands share are declared once (:mod:`steadystream._options`, :mod:`steadystream.cli._groups`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from steadystream.__about__ import __version__
from steadystream._gc import quiet_gc
from steadystream.cli._help import HelpCommand, HelpGroup

_Command = TypeVar("_Command", bound=Callable[..., Any])


class _App(typer.Typer):
    """The app whose every command shows its help as :mod:`steadystream.cli._help` says."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[_Command], _Command]:
        kwargs.setdefault("cls", HelpCommand)
        return super().command(*args, **kwargs)


app = _App(
    name="steadystream",
    cls=HelpGroup,
    help="See and fix the stutter in LLM token streams.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"steadystream {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """See and fix the stutter in LLM token streams."""


_COMMANDS = (
    "analyze",
    "explain",
    "lab",
    "bench",
    "gate",
    "whatif",
    "gateway",
    "report",
    "demo",
    "replay",
    "glass",
)


def _register() -> None:
    # Command modules import only typer, pydantic and the option definitions at module level
    # (steadystream._options, cli._groups, cli._models), so `--help` stays instant.
    for name in _COMMANDS:
        importlib.import_module(f"steadystream.cli.{name}")


def main() -> None:
    """The ``steadystream`` command: this process is ours, so its collector is tuned
    (:func:`~steadystream._gc.quiet_gc`; a load generator's full collections stall its loop
    long enough for events to share a kernel stamp, docs/performance.md)."""
    quiet_gc()
    _register()
    app()
