"""One ``/metrics`` for every worker of a gateway: each publishes a snapshot, any one sums them.

With ``server.workers`` above one, a scrape reaches whichever worker the kernel hands the
connection to, and each worker holds only its own streams' numbers. So every worker writes a
snapshot of its registry to a folder the workers share (at most once a second while it
serves, and on each scrape it answers), and the worker that answers a scrape sums all of
them, as prometheus_client's multiprocess mode does for its own metric types:

- counters and histograms (buckets, sums, counts) add up over every worker that ever ran,
  so a replaced worker's streams still count and nothing goes backwards;
- gauges (streams in flight) add up over the workers that are alive (snapshots a live
  worker refreshed within :data:`LIVE_S`), so a worker that died takes its gauge with it;
- ``_created`` stamps take the earliest.

The parent folds the snapshots of every worker that ended into one file (:func:`retire`),
so the folder stays as small as the set of live workers, and keeps that file's sums in
memory too (:class:`Retired`), to write it again should the folder go.

The gateway's histograms are its own (:mod:`steadystream._histogram`), which
prometheus_client's multiprocess mode cannot see; snapshots of whatever the registry
collects cover them and every future metric alike.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "LIVE_S",
    "PUBLISH_EVERY_S",
    "RETIRED",
    "Retired",
    "SharedMetrics",
    "Snapshot",
    "retire",
    "write_whole",
]

PUBLISH_EVERY_S = 1.0
LIVE_S = 5.0
"""A worker whose snapshot is older than this is gone: its gauges no longer count."""


class SharedMetrics:
    """The snapshot of one worker's metrics in ``folder``, and the sum of every worker's.

    ``view`` gives the registry to take a snapshot of (default: ``registry`` itself); the
    gateway's gives a copy that another thread may collect (:meth:`GatewayMetrics.view`), so
    :meth:`publish` and :meth:`exposition` can run on a thread while the loop serves.
    Snapshots are written in the order their views were taken, whichever thread ends first.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        folder: Path,
        view: Callable[[], CollectorRegistry] | None = None,
    ) -> None:
        self.registry = registry
        self.folder = folder
        self.path = folder / f"worker-{os.getpid()}-{time.time_ns()}.json"
        self._view = view if view is not None else (lambda: registry)
        self._taken = 0  # views handed out (Snapshot.order)
        self._written = 0  # the order of the newest snapshot in the file
        self._lock = threading.Lock()
        self._said = False  # that a snapshot could not be written (said once)

    def snapshot(self) -> Snapshot:
        """This worker's metrics as of now (on the thread that updates them)."""
        self._taken += 1
        return Snapshot(self._view(), self._taken)

    def publish(self, snapshot: Snapshot | None = None) -> None:
        """Write ``snapshot`` (default: one taken now) as this worker's, atomically (a reader
        never sees half a file), unless a newer one is there already."""
        if snapshot is None:
            snapshot = self.snapshot()
        data = orjson.dumps(_families(snapshot))
        with self._lock:
            if snapshot.order <= self._written:
                return
            write_whole(self.path, data)
            self._written = snapshot.order

    def exposition(self, snapshot: Snapshot | None = None) -> bytes:
        """Every worker's metrics summed, in Prometheus' text format (this worker's as of
        ``snapshot``, default: now).

        A snapshot that cannot be written (a full disk, the folder made read-only or
        replaced by a file) does not fail the scrape: this worker's numbers are then taken
        from memory, beside every other worker's that can still be read.
        """
        if snapshot is None:
            snapshot = self.snapshot()
        mine: tuple[str, list[dict[str, Any]]] | None = None
        try:
            self.publish(snapshot)
        except OSError as exc:
            mine = (self.path.name, _families(snapshot))
            if not self._said:
                self._said = True
                print(
                    f"gateway: worker {os.getpid()} cannot write its metrics snapshot "
                    f"({exc}): its /metrics sums what it can still read",
                    file=sys.stderr,
                    flush=True,
                )
        merged = CollectorRegistry(auto_describe=False)
        merged.register(_Merged(self.folder, mine))
        return generate_latest(merged)


class Snapshot(NamedTuple):
    view: CollectorRegistry  # what to collect, on any thread
    order: int  # when it was taken: a later snapshot is never overwritten by an earlier


def _families(snapshot: Snapshot) -> list[dict[str, Any]]:
    """``snapshot`` in the format of the files."""
    return [
        {
            "name": family.name,
            "help": family.documentation,
            "type": family.type,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
        for family in snapshot.view.collect()
    ]


RETIRED = "retired.json"
"""The summed counters and histograms of the workers that ended (written by the parent)."""


class Retired:
    """The parent's side of :data:`RETIRED`: it folds ended workers into it (:func:`retire`)
    and keeps what it wrote, so that a file that went away (a cleaner of /tmp took the
    folder) is written again (:meth:`keep`) and the ended workers' counters never go back."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._kept: Any = None  # what retired.json holds, as last written here
        self._version: tuple[int, int] | None = None  # which file that was

    def fold(self, pid: int) -> None:
        """:func:`retire` ``pid``, from what this parent wrote last."""
        self._kept = retire(self.folder, pid, kept=self._kept)
        self._version = _version(self.folder / RETIRED)

    def keep(self) -> None:
        """Write :data:`RETIRED` again if it is not the file last written (one ``stat``)."""
        if self._kept is None or _version(self.folder / RETIRED) == self._version:
            return
        write_whole(self.folder / RETIRED, orjson.dumps(self._kept))
        self._version = _version(self.folder / RETIRED)


def retire(folder: Path, pid: int, *, kept: Any = None) -> Any:
    """Fold the snapshots of ended worker ``pid`` into :data:`RETIRED`; return what it holds.

    ``kept``: what it held after the last fold (:class:`Retired` keeps it), taken over what
    the file holds now, which may be gone.

    The parent calls this once it has reaped the worker, so the folder holds one file per
    live worker, one for all that ended, and the files of the last fold, however many reloads
    and restarts came before (a worker that crashes at start every second would otherwise
    leave 86,400 files a day, each read by every scrape). ``retired.json`` names the files it
    has taken in, and readers skip those; a file is removed only at a later fold, and named
    until it is gone, so a scrape that read the previous ``retired.json`` still finds it
    (a reader that sees ``retired.json`` change under it reads again: :class:`_Merged`).
    """
    dead = sorted(folder.glob(f"worker-{pid}-*.json"))
    if not dead:
        return kept
    retired = kept or _read(folder / RETIRED) or {"folded": [], "families": []}
    earlier = [name for name in retired["folded"] if (folder / name).exists()]
    sums = _Sums()
    sums.add(retired["families"], live=False)
    folded = list(earlier)
    for path in dead:
        if path.name in folded:
            continue
        snapshot = _read(path)
        if snapshot is not None:
            sums.add(snapshot, live=False)
            folded.append(path.name)
    now = {"folded": folded, "families": sums.families()}
    write_whole(folder / RETIRED, orjson.dumps(now))
    for name in earlier:  # folded at an earlier fold: no reader can still count it
        (folder / name).unlink(missing_ok=True)
    return now


def write_whole(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a reader sees the old file or the new one, never
    half of one (a temporary file of this process's, renamed over it)."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        try:
            temporary.write_bytes(data)
        except FileNotFoundError:
            # The folder is gone (a cleaner of /tmp took it): made again, private as
            # mkdtemp made it, or no scrape would ever succeed again.
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary.write_bytes(data)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def _read(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None  # not there, or replaced under us: the next scrape has it


class _Sums:
    """Snapshots summed: counters and histograms add, gauges only from live workers,
    ``_created`` stamps take the earliest."""

    def __init__(self) -> None:
        self.meta: dict[str, tuple[str, str]] = {}  # name: (help, type)
        self.values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}

    def add(self, snapshot: list[dict[str, Any]], *, live: bool) -> None:
        for family in snapshot:
            name, kind = family["name"], family["type"]
            if kind == "gauge" and not live:
                continue
            self.meta.setdefault(name, (family["help"], kind))
            sums = self.values.setdefault(name, {})
            for sample_name, labels, value in family["samples"]:
                key = (sample_name, tuple(sorted(labels.items())))
                if sample_name.endswith("_created"):
                    sums[key] = min(sums.get(key, value), value)
                else:
                    sums[key] = sums.get(key, 0.0) + value

    def families(self) -> list[dict[str, Any]]:
        """In the snapshot format."""
        return [
            {
                "name": name,
                "help": documentation,
                "type": kind,
                "samples": [
                    [sample, dict(labels), value]
                    for (sample, labels), value in self.values[name].items()
                ],
            }
            for name, (documentation, kind) in self.meta.items()
        ]

    def metrics(self) -> Iterator[Metric]:
        for name, (documentation, kind) in self.meta.items():
            family = Metric(name, documentation, kind)
            for (sample_name, labels), value in self.values[name].items():
                family.add_sample(sample_name, dict(labels), value)
            yield family


class _Merged(Collector):
    """The sum of the snapshots in ``folder``; ``mine``: one worker's file name and the
    snapshot to count in its place (its file could not be written)."""

    def __init__(self, folder: Path, mine: tuple[str, list[dict[str, Any]]] | None = None):
        self.folder = folder
        self.mine = mine

    def collect(self) -> Iterator[Metric]:
        # A fold while this reads could move an ended worker's numbers from its file into
        # retired.json between the two reads: then read again (a fold is a worker's end,
        # rare; the last try's sums are used whatever happens).
        for _ in range(_READ_TRIES):
            before = _version(self.folder / RETIRED)
            sums = self._sums()
            if _version(self.folder / RETIRED) == before:
                break
        yield from sums.metrics()

    def _sums(self) -> _Sums:
        now = time.time()
        sums = _Sums()
        retired = _read(self.folder / RETIRED)
        folded: set[str] = set()
        if retired is not None:
            sums.add(retired["families"], live=False)
            folded = set(retired["folded"])
        if self.mine is not None:
            name, families = self.mine
            sums.add(families, live=True)
            folded.add(name)  # (counted from memory, not from its stale file)
        for path in sorted(self.folder.glob("worker-*.json")):
            if path.name in folded:
                continue  # taken into retired.json, not yet removed
            try:
                live = now - path.stat().st_mtime <= LIVE_S
            except OSError:
                continue
            snapshot = _read(path)
            if snapshot is not None:
                sums.add(snapshot, live=live)
        return sums


_READ_TRIES = 5


def _version(path: Path) -> tuple[int, int] | None:
    """Which ``retired.json`` is there (each fold replaces the file: a new inode)."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns
