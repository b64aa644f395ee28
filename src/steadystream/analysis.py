"""Recorded runs in, one per-stream table out: file by file, in this process or on Ray.

A fleet that spans many files (a bench per host, a gateway per replica, a day of recordings)
is analysed one file at a time: each file's :class:`~steadystream.metrics.StreamTable` is
computed on its own, then the tables are concatenated. A per-stream metric depends on its own
stream alone, so the merged table, and the fleet metrics computed from it, are exactly those
of all the streams read at once; only the small per-stream rows (and each stream's gaps, for
the pooled percentiles) travel, never the timelines.

    >>> tables = analyze_files(["runs/"], MetricConfig())            # this process
    >>> tables = analyze_files(["runs/"], MetricConfig(), ray=True)  # a Ray task per file
    >>> fleet_metrics(tables.fleet_table())

``table`` holds every row, a stream recorded at several vantage points once per vantage
point; :meth:`RunTables.fleet_table` counts each stream once, nearest the reader, as
``steadystream analyze`` does (:func:`~steadystream.bench.summary.one_view_per_stream`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from steadystream._exceptions import InputError, SteadystreamError
from steadystream.bench.summary import one_view_per_stream
from steadystream.bench.verdict import load_run
from steadystream.engine_metrics import is_engine_metrics
from steadystream.files import TIMELINE_SUFFIXES, PathLike
from steadystream.metrics import MetricConfig, StreamTable, stream_table

__all__ = ["FileTable", "RunTables", "analyze_files", "file_table", "timeline_files"]


@dataclass(frozen=True, slots=True)
class FileTable:
    """One file's per-stream table, and a note when its last line was cut off."""

    path: str
    table: StreamTable
    note: str | None = None  # the file's last line was cut off (the streams before it count)


@dataclass(frozen=True, slots=True)
class RunTables:
    """Every file's table, and all of them merged in the order the files were given."""

    files: list[FileTable]
    table: StreamTable
    inputs: list[str] = field(default_factory=list)  # notes on the paths named (timeline_files)

    def notes(self) -> list[str]:
        return self.inputs + [f.note for f in self.files if f.note is not None]

    def file_numbers(self) -> list[int]:
        """Each row's file, by its place among ``files`` (for ``one_view_per_stream``)."""
        return [n for n, f in enumerate(self.files) for _ in range(len(f.table))]

    def fleet_table(self) -> StreamTable:
        """The merged table with each stream once, at its vantage point nearest the reader:
        what ``steadystream analyze`` measures the fleet on (``fleet_metrics`` of it gives
        the command's numbers). A run recorded at one vantage point is ``table`` itself;
        :meth:`view_note` says what was left out."""
        return one_view_per_stream(self.table, self.file_numbers())[0]

    def view_note(self) -> str | None:
        """What :meth:`fleet_table` left out, in words (None: nothing)."""
        return one_view_per_stream(self.table, self.file_numbers())[1]


def timeline_files(paths: Iterable[PathLike], notes: list[str] | None = None) -> list[Path]:
    """The timeline files named, a folder standing for the timeline files under it.

    A folder is searched recursively and its files taken in name order, so that a rerun
    merges them the same way (engine metrics scraped beside a run or by the gateway are not
    timelines, nor is anything but a regular file); a file named outright is taken whatever
    its suffix (reading it says if the suffix is wrong), but it must be a regular file: a
    pipe or a device would be waited on forever. A folder with no timeline file is an error,
    not an empty fleet. A file reached twice (named twice, by another spelling, through a
    link, or inside a folder also named) is taken once, at its first place, so that no
    stream counts twice; ``notes`` gets a line saying so, and one for what a folder held
    that was not a regular file.

    ``paths`` is a list of paths: one path alone is refused (a text would be read as its
    letters, and ``"/"`` walk the whole filesystem).
    """
    paths = _path_list(paths)
    found: list[Path] = []
    seen: set[Path] = set()
    repeats = 0
    irregular = 0
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = []
            for p in sorted(path.rglob("*")):
                if not p.name.endswith(TIMELINE_SUFFIXES) or is_engine_metrics(p.name):
                    continue
                if p.is_file():
                    inside.append(p)
                elif p.exists() and not p.is_dir():
                    irregular += 1
            if not inside:
                raise InputError(
                    f"{path}: no timeline files in this folder"
                    f" (looked for {', '.join(TIMELINE_SUFFIXES)})"
                )
        elif path.is_file():
            inside = [path]
        elif path.exists():
            raise InputError(f"{path}: not a regular file or a folder")
        elif path.is_symlink():
            raise InputError(f"{path}: a link to nothing (its target is gone, or the links loop)")
        else:
            raise InputError(f"{path}: no such file or folder")
        for p in inside:
            real = p.resolve()
            if real in seen:
                repeats += 1
            else:
                seen.add(real)
                found.append(p)
    if notes is not None and repeats == 1:
        notes.append("1 file named twice was read once")
    elif notes is not None and repeats:
        notes.append(f"{repeats} names of files already named were skipped: each is read once")
    if notes is not None and irregular:
        notes.append(
            f"{irregular} {'entry' if irregular == 1 else 'entries'} in the folders named"
            " with a timeline suffix but not a regular file (a pipe, a socket, a device)"
            f" {'was' if irregular == 1 else 'were'} skipped"
        )
    return found


def _path_list(paths: Iterable[PathLike]) -> list[PathLike]:
    if isinstance(paths, str | bytes | os.PathLike):
        raise TypeError(
            f"paths must be a list of files or folders, not one {type(paths).__name__}"
            f" (write [{os.fsdecode(paths)!r}])"
        )
    return list(paths)


def file_table(path: PathLike, config: MetricConfig) -> FileTable:
    """Read one timeline file and compute its per-stream table."""
    run = load_run(Path(path), required=False)
    return FileTable(os.fspath(path), stream_table(run.timelines, config), run.note)


def analyze_files(
    paths: Iterable[PathLike],
    config: MetricConfig,
    *,
    ray: bool = False,
    ray_address: str | None = None,
) -> RunTables:
    """Per-stream tables of every timeline file in ``paths``, and the merged table.

    With ``ray=True`` each file is read and reduced by a Ray task, on whichever node has a
    free CPU: the files must be readable at the same path there (a shared filesystem; any
    local Ray sees this machine's files). ``ray_address`` is the cluster to join; without it,
    Ray's own rule applies (``RAY_ADDRESS``, else a local Ray started for this call).

    ``table`` holds every row; ``fleet_table()`` each stream once, as ``analyze`` counts it.
    """
    if not isinstance(config, MetricConfig):
        raise TypeError(f"config must be a MetricConfig, got {config!r}")
    inputs: list[str] = []
    files = timeline_files(paths, inputs)
    if ray or ray_address is not None:
        import steadystream._ray as _ray

        # A worker's folder is not the caller's: the same path there is the absolute one.
        absolute = [path.absolute() for path in files]
        tables = _ray.map_files(_file_table_or_error, absolute, config, address=ray_address)
    else:
        tables = [file_table(path, config) for path in files]
    return RunTables(tables, StreamTable.concat([t.table for t in tables]), inputs)


def _file_table_or_error(path: Path, config: MetricConfig) -> FileTable | SteadystreamError:
    """:func:`file_table`, with a bad file's error returned as a value.

    Ray would wrap a raised error in its own, traceback and all; returned, it reaches the
    caller as the same clear error the single-process path gives. Any other error is returned
    as one that names the file (see :func:`steadystream._ray.file_failed`).
    """
    try:
        return file_table(path, config)
    except SteadystreamError as exc:
        return exc
    except Exception as exc:
        from steadystream._ray import file_failed

        return file_failed(path, exc)
