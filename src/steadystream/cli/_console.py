"""The consoles the commands print to: a terminal's width on a terminal, no limit in a pipe.

A pipe, a file or a test's capture has no width to fit, and ``COLUMNS`` is not set there:
rich would take 80 columns and cut stream ids and outcomes to fit (``ss953a…``, ``comple…``)
and break notes mid-sentence. There every line is as long as what it says, so tables keep
their cells whole and each note stays one line for ``grep`` and ``cut``. On a terminal the
tables fit its width, and the columns people copy from (stream ids) fold rather than being
cut (``overflow="fold"`` where they are declared).
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape
from rich.text import Text

__all__ = ["PIPE_WIDTH", "console", "plain", "quoted"]

# C0 controls but tab and line feed, DEL and C1: escapes that move the cursor, clear the
# screen or set a terminal's title, and a carriage return that writes over a line.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

PIPE_WIDTH = 10_000
"""Wider than any line a command prints, so nothing is cut or wrapped in a pipe. Tables are
not expanded to it: each is as wide as its content."""


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width there, :data:`PIPE_WIDTH` else."""
    on_terminal = Console(stderr=stderr)
    if on_terminal.is_terminal:
        return on_terminal
    return Console(stderr=stderr, width=PIPE_WIDTH)


def plain(text: object) -> Text:
    """Text from outside (a stream id, a label's value, a cause a file names) for a table's
    cell or header: shown as written, never read as rich markup (``[/]x`` is no error, and
    ``[link=...]`` no link), with its control characters shown as U+FFFD."""
    return Text(_CONTROL.sub("\ufffd", str(text)))


def quoted(text: object) -> str:
    """:func:`plain` for a line that has markup of its own around the text (a note)."""
    return escape(_CONTROL.sub("\ufffd", str(text)))
