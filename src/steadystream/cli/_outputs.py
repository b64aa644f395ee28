"""Where a command writes: refused before anything is read or run when it cannot be written,
or when it is a file the command reads (the recording would be replaced by what was made
from it)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from steadystream.files import TIMELINE_SUFFIXES

__all__ = ["is_one_of", "timeline_output_problem"]


def is_one_of(output: Path, inputs: Iterable[Path]) -> bool:
    """Whether ``output`` is the same file as one of ``inputs`` (any spelling, a hard link);
    an input that is not there is none."""
    for path in inputs:
        try:
            if os.path.samefile(output, path):
                return True
        except OSError:  # (not there: reading it says so)
            continue
    return False


def timeline_output_problem(output: Path, inputs: Iterable[Path], read_as: str) -> str | None:
    """What is wrong with ``output`` as a timeline file to write (None: nothing); ``read_as``
    names the inputs in the message (``the recorded run replayed here``)."""
    if not output.name.endswith(TIMELINE_SUFFIXES):
        return f"name a timeline file ({', '.join(TIMELINE_SUFFIXES)})"
    if output.is_dir():
        return "a folder; name a timeline file"
    if output.exists() and not output.is_file():
        return "not a regular file (a FIFO would hang the write)"
    if not output.parent.is_dir():
        return f"its folder {output.parent} does not exist"
    if output.exists() and is_one_of(output, inputs):
        return f"it is {read_as}: name another file"
    return None
