"""The stalls of many recorded files explained on Ray: a task per file, one process's answer.

Attributing one stall reads more than its own stream, and more than its own file:

- the other vantage points of the same request (a gateway's two edges may be recorded in
  another file than the client's);
- every other stream in flight across the gap (whether one engine step stretched for all),
  and how many other streams' first tokens came in a lump (a server holding heads);
- the engine metrics scraped during the run.

So the files are not explained each on its own (that would lose the other files' streams in
flight and name other causes); the work runs in two rounds of Ray tasks:

1. a task per file reads it, and sends back its streams' ids and vantage points and their
   text events on the wall clock, packed (:class:`~steadystream.attribution.clocks.StreamClocks`);
   its stream views stay in Ray's object store, where the second round reads them;
2. here, files that share a request id are put in one group, and the subject streams' clocks
   of every file are merged into the fleet's, which goes to the object store once; then a
   task per group attributes its stalls against the fleet's streams in flight and the engine
   metrics, every stall tagged with its stream's place among all the timelines.

The stalls are put back in that order and the totals and the most hurt streams computed from
them as :func:`~steadystream.attribution.explain` does, so the explanation is the one a single
process gives for the same files, stall for stall. ``analyze --ray`` gets each file's
per-stream table from the same first round (one read per file).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import numpy.typing as npt

import steadystream._ray as _ray
from steadystream._exceptions import SteadystreamError
from steadystream._types import Where
from steadystream.analysis import FileTable, RunTables
from steadystream.attribution import EngineSamples, Explanation
from steadystream.attribution.clocks import StreamClocks
from steadystream.attribution.explain import (
    AttributedStall,
    StreamsSeen,
    assemble,
    attribute_tagged,
    check_threshold,
)
from steadystream.attribution.neighbours import Neighbours
from steadystream.attribution.streams import (
    StreamView,
    group_views,
    outer_ranks,
    stream_numbers,
    stream_views,
)
from steadystream.bench.summary import has_stall
from steadystream.bench.verdict import load_run
from steadystream.metrics import MetricConfig, StreamTable, stream_table

__all__ = ["FilesExplained", "explain_files"]


@dataclass(frozen=True, slots=True)
class FilesExplained:
    """The explanation of all the files' stalls (None: not asked, or no stall to explain),
    each file's per-stream table when one was asked for, and notes."""

    explanation: Explanation | None
    tables: RunTables | None
    notes: list[str]


@dataclass(frozen=True, slots=True)
class _FileHead:
    """What the first round sends back of a file, beside its views and clocks."""

    path: str
    ids: list[str]
    wheres: list[str]
    ranks: list[int]
    glass: int  # glass timelines (a page's painted edge)
    table: FileTable | None
    note: str | None  # the file's last line was cut off


def explain_files(
    paths: Sequence[Path],
    *,
    stall_threshold_ns: int,
    engine: EngineSamples | None = None,
    worst: int = 10,
    config: MetricConfig | None = None,
    address: str | None = None,
    attribute: bool = True,
) -> FilesExplained:
    """Explain the stalls of the timeline files ``paths`` (in that order) on Ray.

    With ``config``, each file's per-stream table is computed too (``analyze``), and the
    stalls are explained only when the merged table has one, as ``analyze`` does without Ray.
    ``address`` is the cluster to join (see :func:`steadystream._ray.connected`); the files
    must be readable at the same path on its nodes. With ``attribute`` False (``analyze
    --no-explain``), only the tables are made.
    """
    check_threshold(stall_threshold_ns)
    with _ray.connected(address) as ray:
        read = ray.remote(num_cpus=1, num_returns=3)(_read_file)
        # A worker's folder is not the caller's: the same path there is the absolute one.
        refs = [read.remote(Path(path).absolute(), config) for path in paths]
        heads: list[_FileHead] = []
        for head in ray.get([ref[0] for ref in refs]):
            if isinstance(head, SteadystreamError):
                raise head
            heads.append(head)
        notes = [head.note for head in heads if head.note is not None]
        tables = None
        if config is not None:
            files = [head.table for head in heads if head.table is not None]
            tables = RunTables(files, StreamTable.concat([f.table for f in files]))
            if not attribute or not has_stall(tables.table, config):
                return FilesExplained(None, tables, notes)
            if _mixes_glass(heads):
                notes.append(
                    "stall causes are not attributed with --ray for runs that hold glass"
                    " timelines beside others; run without --ray"
                )
                return FilesExplained(None, tables, notes)
        offsets = np.cumsum([0, *(len(head.ids) for head in heads)])[:-1].tolist()
        streams = _file_streams(heads)
        outer = outer_ranks(
            [s for part in streams for s in part], [r for head in heads for r in head.ranks]
        )
        parts = ray.get([ref[2] for ref in refs])
        fleet = StreamClocks.concat(
            [
                part.select(_subject_mask(head, numbers, outer), shift=offset)
                for head, numbers, part, offset in zip(heads, streams, parts, offsets, strict=True)
            ]
        )
        del parts
        clocks_ref, engine_ref = ray.put(fleet), ray.put(engine)
        attribute_group = ray.remote(num_cpus=1)(_attribute_group)
        results = ray.get(
            [
                attribute_group.remote(
                    stall_threshold_ns,
                    engine_ref,
                    clocks_ref,
                    [offsets[f] for f in group],
                    [streams[f] for f in group],
                    *(refs[f][1] for f in group),
                )
                for group in _groups(heads)
            ]
        )
    tagged = [pair for stalls, _ in results for pair in stalls]
    tagged.sort(key=lambda pair: pair[0])  # stable: a stream's stalls keep their order
    seen = StreamsSeen.merge(seen for _, seen in results)
    explanation = assemble([stall for _, stall in tagged], seen, engine, stall_threshold_ns, worst)
    return FilesExplained(explanation, tables, notes)


def _read_file(
    path: Path, config: MetricConfig | None
) -> tuple[_FileHead | SteadystreamError, list[StreamView] | None, StreamClocks | None]:
    """Round one, in a Ray task: a file's head, views and clocks (views index it alone).

    A bad file's error is returned as a value: raised, Ray would wrap it in its own, and it
    would not reach the user as the clear error one process gives. Any other error is
    returned as one that names the file (see :func:`steadystream._ray.file_failed`).
    """
    try:
        run = load_run(path, required=False)
        views = stream_views(run.timelines, [0] * len(run.timelines))
        table = None
        if config is not None:
            table = FileTable(os.fspath(path), stream_table(run.timelines, config), run.note)
    except SteadystreamError as exc:
        return exc, None, None
    except Exception as exc:
        return _ray.file_failed(path, exc), None, None
    head = _FileHead(
        path=os.fspath(path),
        ids=[view.stream_id for view in views],
        wheres=[view.where.value for view in views],
        ranks=[view.rank for view in views],
        glass=sum(1 for view in views if view.where is Where.GLASS),
        table=table,
        note=run.note,
    )
    return head, views, StreamClocks.of(views)


def _attribute_group(
    stall_threshold_ns: int,
    engine: EngineSamples | None,
    fleet: StreamClocks,
    offsets: list[int],
    streams: list[list[int]],
    *files: list[StreamView],
) -> tuple[list[tuple[int, AttributedStall]], StreamsSeen]:
    """Round two, in a Ray task: the stalls of a group of files (every view of their ids),
    each tagged with its stream's place among all the files' timelines."""
    views = [
        replace(view, index=view.index + offset, stream=stream)
        for offset, numbers, part in zip(offsets, streams, files, strict=True)
        for view, stream in zip(part, numbers, strict=True)
    ]
    subjects, by_stream = group_views(views)
    neighbours = Neighbours(fleet)
    tagged = attribute_tagged(subjects, by_stream, neighbours, engine, stall_threshold_ns)
    return tagged, StreamsSeen.of(subjects, views)


def _file_streams(heads: Sequence[_FileHead]) -> list[list[int]]:
    """Each file's views' stream numbers among all the files' (see ``stream_numbers``)."""
    numbers = stream_numbers(
        [i for head in heads for i in head.ids],
        [w for head in heads for w in head.wheres],
        [f for f, head in enumerate(heads) for _ in head.ids],
    )
    starts = np.cumsum([0, *(len(head.ids) for head in heads)]).tolist()
    return [numbers[a:b] for a, b in pairwise(starts)]


def _subject_mask(
    head: _FileHead, streams: Sequence[int], outer: dict[int, int]
) -> npt.NDArray[np.bool_]:
    """Which of a file's views are subjects: at their stream's vantage point nearest the reader."""
    return np.array(
        [rank == outer[s] for s, rank in zip(streams, head.ranks, strict=True)], dtype=np.bool_
    )


def _groups(heads: Sequence[_FileHead]) -> list[list[int]]:
    """The files in groups that share no request id with another group, in file order."""
    parent = list(range(len(heads)))

    def root(f: int) -> int:
        while parent[f] != f:
            parent[f] = parent[parent[f]]
            f = parent[f]
        return f

    owner: dict[str, int] = {}
    for f, head in enumerate(heads):
        for stream_id in head.ids:
            first = owner.setdefault(stream_id, f)
            if first != f:
                a, b = root(first), root(f)
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for f in range(len(heads)):
        groups.setdefault(root(f), []).append(f)
    return list(groups.values())


def _mixes_glass(heads: Sequence[_FileHead]) -> bool:
    """Whether the run holds glass timelines beside others: ``analyze`` then describes the
    glass edge alone (:func:`steadystream.glass.edges.rendered_view`)."""
    glass = sum(head.glass for head in heads)
    return 0 < glass < sum(len(head.ids) for head in heads)
