"""Both edges of every stream as timelines, and the rotating JSONL files they go to.

For each stream the gateway keeps two logs: ``gateway-upstream`` (when each event arrived
from the upstream) and ``gateway-downstream`` (when it was handed to the client's
connection). Both are offsets from the same instant, the gateway's receipt of the request,
so ``downstream - upstream`` per event is the gateway's own contribution (pacing, relay).
The request id is the stream id on both, and is what the gateway sends upstream, so client,
gateway and lab records join on it.

Logs are appended on the hot path (a few ``array.append`` per event); timelines are built
once, when the stream ends. Text is kept in memory for token estimates but written only
when the recording is configured to keep it; prompts are never recorded.
"""

from __future__ import annotations

import fcntl
import os
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from steadystream._types import EventKind, Nanos, Outcome, TokenSource, Where
from steadystream.files import JsonlWriter
from steadystream.gateway.events import Piece
from steadystream.timeline import Timeline, assign_tokens, is_text_kind

if TYPE_CHECKING:
    from steadystream.gateway.telemetry import Traced

__all__ = ["EdgeLog", "StreamRecord", "TimelineRecorder", "TimelineSink"]


class TimelineSink(Protocol):
    """Where finished streams go: :class:`TimelineRecorder`, or a test's list."""

    def write(self, timelines: Sequence[Timeline]) -> None: ...

    def close(self) -> None: ...


class EdgeLog:
    """The events one edge saw, as parallel arrays."""

    __slots__ = (
        "_marks",
        "_text_bytes",
        "_usage",
        "_wire",
        "first_byte_ns",
        "header_ns",
        "kinds",
        "texts",
        "times",
    )

    def __init__(self) -> None:
        self.times = array("q")
        self.kinds = array("B")
        self._wire = array("i")
        self._text_bytes = array("i")
        self._usage = array("q")
        self.texts: list[str] = []
        self._marks: dict[int, str] = {}
        self.header_ns: Nanos | None = None
        self.first_byte_ns: Nanos | None = None

    def __len__(self) -> int:
        return len(self.times)

    def add(self, t: Nanos, piece: Piece) -> None:
        kind = piece.kind
        if kind is None:  # [DONE] is the end marker, not an event
            return
        text = piece.text
        self.times.append(t)
        self.kinds.append(kind)
        self._wire.append(len(piece.raw) if piece.raw else piece.wire)
        self._text_bytes.append(len(text) if text.isascii() else len(text.encode()))
        self._usage.append(piece.usage)
        self.texts.append(text)

    def mark_next(self, label: str) -> None:
        """Annotate the gap that ends at the next event (a failover, for example)."""
        index = len(self.times)
        previous = self._marks.get(index)
        self._marks[index] = label if previous is None else f"{previous}+{label}"

    @property
    def first_text_ns(self) -> Nanos | None:
        for t, kind in zip(self.times, self.kinds, strict=True):
            if EventKind(kind).carries_text:
                return t
        return None

    def timeline(
        self,
        stream_id: str,
        where: Where,
        *,
        end_ns: Nanos,
        outcome: Outcome,
        error: str | None,
        usage: dict[str, int] | None,
        exact_usage: bool,
        labels: dict[str, str],
        started_at: float,
        keep_text: bool,
        meta: dict[str, Any],
        redact: Callable[[str], str] = str,
        same_as: Timeline | None = None,
    ) -> Timeline:
        """This edge's timeline; ``same_as``: a timeline of the same events (see
        :meth:`same_events`), whose token counts this one takes rather than count again."""
        kinds = np.frombuffer(self.kinds, dtype=np.uint8).copy()
        text_bytes = np.frombuffer(self._text_bytes, dtype=np.int32).copy()
        if same_as is not None:
            tokens, source = same_as.tokens.copy(), same_as.token_source
        else:
            tokens, source = self._tokens(kinds, text_bytes, usage, exact_usage)
        annotations: dict[str, list[str | None]] = {}
        marks = {i: label for i, label in self._marks.items() if i < len(kinds)}
        if marks:
            annotations["failover"] = [marks.get(i) for i in range(len(kinds))]
        timeline = Timeline(
            stream_id=stream_id,
            where=where,
            times=np.frombuffer(self.times, dtype=np.int64).copy(),
            tokens=tokens,
            wire_bytes=np.frombuffer(self._wire, dtype=np.int32).copy(),
            text_bytes=text_bytes,
            kinds=kinds,
            texts=[redact(text) for text in self.texts] if keep_text else None,
            header_ns=self.header_ns,
            first_byte_ns=self.first_byte_ns,
            end_ns=end_ns,
            outcome=outcome,
            error=error,
            usage=usage,
            token_source=source,
            labels=dict(labels),
            started_at=started_at,
            annotations=annotations,
        )
        timeline.meta.update(meta)
        return timeline

    def same_events(self, other: EdgeLog) -> bool:
        """Whether both logs hold the same events (times aside): a relay that forwarded
        every event as it came. Their token counts are then the same."""
        return (
            self.kinds == other.kinds
            and self._text_bytes == other._text_bytes
            and self._usage == other._usage
            and self.texts == other.texts
        )

    def _tokens(
        self,
        kinds: npt.NDArray[np.uint8],
        text_bytes: npt.NDArray[np.int32],
        usage: dict[str, int] | None,
        exact_usage: bool,
    ) -> tuple[npt.NDArray[np.int32], TokenSource]:
        running = np.frombuffer(self._usage, dtype=np.int64)
        text_events = is_text_kind(kinds) & (text_bytes > 0)
        if exact_usage and text_events.any() and (running[text_events] >= 0).all():
            counted = running >= 0
            tokens = np.zeros(len(kinds), dtype=np.int32)
            tokens[counted] = np.diff(running[counted], prepend=0)
            # Only a counter that never goes back and gives every text event a token is
            # trusted; anything else falls back to the usage total or an estimate.
            if (tokens >= 0).all() and (tokens[text_events] >= 1).all():
                return tokens, TokenSource.EXACT
        total = usage.get("completion_tokens") if usage is not None and exact_usage else None
        return assign_tokens(kinds, text_bytes, texts=self.texts, usage_completion_tokens=total)


class StreamRecord:
    """Everything measured about one request, at both edges."""

    __slots__ = (
        "attempts",
        "downstream",
        "error",
        "failovers",
        "labels",
        "meta",
        "outcome",
        "received_ns",
        "request_id",
        "started_at",
        "trace",
        "upstream",
        "usage",
    )

    def __init__(self, request_id: str, received_ns: Nanos, labels: dict[str, str]) -> None:
        self.request_id = request_id
        self.received_ns = received_ns
        self.started_at = time.time()
        self.labels = labels
        self.upstream = EdgeLog()
        self.downstream = EdgeLog()
        self.attempts: list[dict[str, Any]] = []
        self.failovers: list[dict[str, Any]] = []
        self.outcome = Outcome.COMPLETE
        self.error: str | None = None
        self.usage: dict[str, int] | None = None
        self.meta: dict[str, Any] = {}
        self.trace: Traced | None = None  # with telemetry on (gateway/telemetry.py)

    def offset(self, now: Nanos) -> Nanos:
        """A clock reading as a timeline offset (from the request's receipt)."""
        return now - self.received_ns

    def timelines(
        self, end: Nanos, *, keep_text: bool, redact: Callable[[str], str] = str
    ) -> tuple[Timeline, Timeline]:
        """(upstream, downstream) timelines, built once the stream is over."""
        meta = {"attempts": self.attempts, "failovers": self.failovers, **self.meta}
        # A fallback's usage counts only its own part: trust usage with one attempt only.
        exact = len(self.attempts) <= 1
        common: dict[str, Any] = {
            "end_ns": self.offset(end),
            "outcome": self.outcome,
            "error": self.error,
            "usage": self.usage,
            "exact_usage": exact,
            "labels": self.labels,
            "started_at": self.started_at,
            "keep_text": keep_text,
            "redact": redact,
            "meta": meta,
        }
        up = self.upstream.timeline(self.request_id, Where.GATEWAY_UPSTREAM, **common)
        same = self.downstream.same_events(self.upstream)
        down = self.downstream.timeline(
            self.request_id, Where.GATEWAY_DOWNSTREAM, same_as=up if same else None, **common
        )
        return up, down


class TimelineRecorder:
    """Rotating JSONL files of timelines in one directory.

    A new file is started every ``rotate_streams`` streams; only the newest ``keep_files``
    files this recorder wrote are kept, and with them the newest of the files that ended
    gateway processes left in the directory, up to the same count. Each line is flushed when
    written, so a crash loses no finished stream.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep_text: bool = False,
        rotate_streams: int = 10_000,
        keep_files: int = 20,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_text = keep_text
        self.rotate_streams = rotate_streams
        self.keep_files = keep_files
        self.files: list[Path] = []
        self._writer: JsonlWriter | None = None
        self._lock: int | None = None  # a descriptor holding the current file's flock
        self._streams_in_file = 0
        self._serial = 0

    def write(self, timelines: Sequence[Timeline]) -> None:
        """Write one stream's timelines (both edges) to the current file."""
        if self._writer is None or self._streams_in_file >= self.rotate_streams:
            self._rotate()
        writer = self._writer
        assert writer is not None
        for timeline in timelines:
            writer.write(timeline)
        self._streams_in_file += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _rotate(self) -> None:
        self.close()
        self._serial += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = self.directory / f"gateway-{stamp}-{os.getpid()}-{self._serial:04d}.jsonl"
        self._writer = JsonlWriter(path, keep_text=self.keep_text)
        self._lock = os.open(path, os.O_RDONLY)
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # this file is being written: no pruner's
        self._streams_in_file = 0
        self.files.append(path)
        while len(self.files) > self.keep_files:
            old = self.files.pop(0)
            old.unlink(missing_ok=True)
        self._prune_ended()

    def _prune_ended(self) -> None:
        """Count the files of ended gateway processes against ``keep_files`` too.

        Each worker, and each run of the gateway, writes its own files; without this, every
        restart and every reload would leave up to ``keep_files`` more for good. A writer
        holds a lock on the file it writes (``flock``, which the kernel drops when the
        process ends, however it ends); a file nobody holds and nobody has written for
        :data:`_ENDED_AFTER_S` is an ended run's. Process ids would not do: a gateway in
        another container sees other ids, and one that is pid 1 has the same id every run.
        """
        now = time.time()
        ended = []
        for path in self.directory.glob("gateway-*.jsonl"):
            if path in self.files:
                continue
            try:
                if now - path.stat().st_mtime > _ENDED_AFTER_S and not _held(path):
                    ended.append(path)
            except OSError:
                continue
        room = max(0, self.keep_files - len(self.files))
        ended.sort(key=lambda p: p.name[len("gateway-") :])  # oldest first (the stamp)
        for path in ended[: max(0, len(ended) - room)]:
            path.unlink(missing_ok=True)


_ENDED_AFTER_S = 600.0


def _held(path: Path) -> bool:
    """Whether a writer holds ``path``'s lock."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (which also lets go of the lock, if it was taken)
    return False
