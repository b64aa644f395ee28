"""The ``--record`` file of the servers (``lab``, ``replay``): ground truth appended to it."""

from __future__ import annotations

from pathlib import Path

from steadystream._exceptions import InputError
from steadystream.files import JsonlWriter

__all__ = ["truth_writer"]


def truth_writer(record: Path | None, *, keep_text: bool = False) -> JsonlWriter | None:
    """A writer appending to ``record`` (None: no file), or an :class:`InputError` naming the
    option when it cannot be written (a folder, a missing folder, no permission), before the
    server starts rather than in a traceback."""
    if record is None:
        return None
    try:
        return JsonlWriter(record, keep_text=keep_text, append=True)
    except OSError as exc:
        raise InputError(f"--record: cannot write {str(record)!r}: {exc.strerror or exc}") from exc
