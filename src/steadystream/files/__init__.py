"""Timeline files: JSONL (schema ``steadystream.timeline/1``), gzip-compressed JSONL, Parquet.

docs/format.md describes every key. Files are written so that they always read back (the writer
refuses a timeline the reader would reject), and a file cut off by a crash still loads: the cut
last line is reported, not fatal. Prompts and completions are stored only when asked for.

JSONL is written and read by ``_jsonl`` (lines parsed by ``_records``, event arrays checked and
cut by ``_blocks``); Parquet by ``_parquet``, imported only when used, as pyarrow is optional.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

from steadystream._exceptions import InputError
from steadystream.files._jsonl import (
    JsonlReader,
    JsonlWriter,
    PathLike,
    ReadResult,
    iter_jsonl,
    read_jsonl,
    write_jsonl,
)
from steadystream.timeline import Timeline

__all__ = [
    "TIMELINE_SUFFIXES",
    "JsonlReader",
    "JsonlWriter",
    "PathLike",
    "ReadResult",
    "iter_jsonl",
    "read_jsonl",
    "read_parquet",
    "read_timelines",
    "write_jsonl",
    "write_parquet",
    "write_timelines",
]


# -- Parquet and dispatch ---------------------------------------------------------------------


def write_parquet(path: PathLike, timelines: Iterable[Timeline], *, keep_text: bool = False) -> int:
    """Write timelines as a Parquet file, one row per stream; needs pyarrow."""
    with _needs_pyarrow():
        from steadystream.files import _parquet
    return _parquet.write_parquet(os.fspath(path), timelines, keep_text=keep_text)


def read_parquet(path: PathLike) -> list[Timeline]:
    """Load the timelines of a Parquet file written by :func:`write_parquet`; needs pyarrow."""
    with _needs_pyarrow():
        from steadystream.files import _parquet
    return _parquet.read_parquet(os.fspath(path))


@contextlib.contextmanager
def _needs_pyarrow() -> Iterator[None]:
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "pyarrow":
            raise
        raise InputError("Parquet files need pyarrow: pip install steadystream[parquet]") from exc


TIMELINE_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
"""The suffixes a timeline file may have; each names its format."""


def read_timelines(path: PathLike, *, format: str | None = None) -> ReadResult:
    """Load a timeline file, choosing the format by suffix: .jsonl, .jsonl.gz or .parquet.

    A peer's result file (vLLM bench, AIPerf, GenAI-Perf: docs/format.md#peers) is found by
    its content and read as timelines, one per request; ``format`` names the format instead
    (``steadystream`` or one of :data:`~steadystream.files.peers.PEER_FORMATS`).
    """
    from steadystream.files import peers

    name = os.fspath(path)
    if format is not None and format not in peers.FILE_FORMATS:
        raise InputError(
            f"unknown format {format!r}; expected one of {', '.join(peers.FILE_FORMATS)}"
        )
    if os.path.exists(name) and not os.path.isfile(name):
        # A folder is the caller's to list; a FIFO or a device would hang the reader, or
        # never end (/dev/zero).
        what = "a folder" if os.path.isdir(name) else "not a regular file"
        raise InputError(f"{name}: {what}; expected a timeline file")
    if format is None and not name.endswith(".parquet") and os.path.isfile(name):
        format = peers.detect_format(name)
    if format is not None and format != "steadystream":
        return peers.read_peer(name, format)
    if name.endswith(".parquet"):
        return ReadResult(read_parquet(name))
    if name.endswith((".jsonl", ".jsonl.gz")) or format == "steadystream":
        return read_jsonl(name)
    raise InputError(
        f"{name}: unknown timeline file suffix; expected one of {TIMELINE_SUFFIXES}, or a peer's"
        f" result file ({', '.join(peers.PEER_FORMATS)})"
    )


def write_timelines(
    path: PathLike, timelines: Iterable[Timeline], *, keep_text: bool = False
) -> int:
    """Write a timeline file, choosing the format by suffix: .jsonl, .jsonl.gz or .parquet."""
    name = os.fspath(path)
    if name.endswith(".parquet"):
        return write_parquet(name, timelines, keep_text=keep_text)
    if name.endswith((".jsonl", ".jsonl.gz")):
        return write_jsonl(name, timelines, keep_text=keep_text)
    raise InputError(f"{name}: unknown timeline file suffix; expected one of {TIMELINE_SUFFIXES}")
