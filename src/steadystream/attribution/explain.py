"""Explain every stall of a run: its cause, how sure, why; stall time by cause (pure).

``explain(timelines, engine=...)`` takes the timelines of a run (any vantage points, joined
by request id) and, optionally, engine metrics scraped during it, and returns an
:class:`Explanation`. The CLI, ``analyze``, the report and the findings all read this.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from numbers import Real
from typing import Any

from steadystream._types import Where
from steadystream.attribution.causes import MITIGATIONS
from steadystream.attribution.engine import EngineSamples
from steadystream.attribution.evidence import Neighbours, gather_all
from steadystream.attribution.rules import decide
from steadystream.attribution.shares import Share, split
from steadystream.attribution.streams import StreamView, find_all_stalls, subjects_and_edges
from steadystream.timeline import Timeline

__all__ = [
    "AttributedStall",
    "CauseShare",
    "Explanation",
    "HurtStream",
    "StreamsSeen",
    "assemble",
    "attribute_stalls",
    "attribute_tagged",
    "check_files",
    "check_threshold",
    "explain",
]

DEFAULT_STALL_THRESHOLD_NS = 400_000_000


@dataclass(frozen=True, slots=True)
class AttributedStall:
    """One stall and its cause. Times are ns from the stream's own start."""

    stream: int  # which stream of the run (two runs may reuse a stream id): stream_numbers
    stream_id: str
    where: Where
    event_index: int  # the event that ends the gap, among its timeline's events
    text_index: int  # the same event, among the timeline's text events
    start_ns: int
    end_ns: int
    cause: str
    confidence: float
    evidence: str
    first_token: bool  # the wait for the first token
    started_at: float | None  # the stall's start on the wall clock (unix seconds)
    shares: tuple[Share, ...] = ()  # its time by cause, largest first (empty: all ``cause``)
    rerun: int = 0  # which stream of its id: 0 the first file's to hold it, 1 the next one's...
    engine_read: bool = False  # the engine metrics had a scrape across it

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def parts(self) -> tuple[Share, ...]:
        """Its time by cause: the shares, or all of it to ``cause``."""
        return self.shares or (Share(self.cause, 1.0, self.confidence),)

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "where": self.where.value,
            "event_index": self.event_index,
            "text_index": self.text_index,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_s": self.duration_s,
            "first_token": self.first_token,
            "cause": self.cause,
            "confidence": round(self.confidence, 3),
            "shares": [share.to_json(self.duration_s) for share in self.parts],
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class CauseShare:
    cause: str
    stalls: int
    time_s: float
    share: float  # of all stall time
    mitigation: str

    def to_json(self) -> dict[str, Any]:
        return {
            "stalls": self.stalls,
            "time_s": self.time_s,
            "share": self.share,
            "mitigation": self.mitigation,
        }


@dataclass(frozen=True, slots=True)
class HurtStream:
    stream_id: str
    stalls: int
    time_s: float
    cause: str  # the cause of most of its stall time

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "stalls": self.stalls,
            "time_s": self.time_s,
            "cause": self.cause,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """Every stall with its cause, and the totals."""

    stalls: list[AttributedStall]
    by_cause: list[CauseShare]  # most stall time first
    hurt: list[HurtStream]  # most stall time first
    streams: int  # streams explained (one per request, nearest the reader)
    sources: list[str]  # the evidence that was at hand, in words
    stall_threshold_ns: int
    notes: list[str] = field(default_factory=list)  # what the reader should know of them

    @property
    def stall_time_s(self) -> float:
        return sum(share.time_s for share in self.by_cause)

    @property
    def dominant(self) -> CauseShare | None:
        return self.by_cause[0] if self.by_cause else None

    def to_json(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "stall_threshold_s": self.stall_threshold_ns / 1e9,
            "stall_time_s": self.stall_time_s,
            "sources": self.sources,
            "by_cause": {share.cause: share.to_json() for share in self.by_cause},
            "most_hurt": [stream.to_json() for stream in self.hurt],
            "stalls": [stall.to_json() for stall in self.stalls],
        }


@dataclass(frozen=True, slots=True)
class StreamsSeen:
    """How many streams were explained, and the vantage points they were seen at."""

    streams: int  # the subjects
    subject_wheres: frozenset[str]
    wheres: frozenset[str]  # of every timeline, subjects and other edges

    @classmethod
    def of(cls, subjects: Sequence[StreamView], views: Iterable[StreamView]) -> StreamsSeen:
        return cls(
            len(subjects),
            frozenset(s.where.value for s in subjects),
            frozenset(v.where.value for v in views),
        )

    @classmethod
    def merge(cls, parts: Iterable[StreamsSeen]) -> StreamsSeen:
        parts = list(parts)
        return cls(
            sum(p.streams for p in parts),
            frozenset().union(*(p.subject_wheres for p in parts)),
            frozenset().union(*(p.wheres for p in parts)),
        )


def explain(
    timelines: Iterable[Timeline],
    *,
    stall_threshold_ns: int = DEFAULT_STALL_THRESHOLD_NS,
    engine: EngineSamples | None = None,
    worst: int = 10,
    files: Iterable[int] | None = None,
) -> Explanation:
    """Attribute every stall of ``timelines`` (see the module docstring). ``files`` is the
    file each timeline came from, where they came from several: an id reused by another file
    at the same vantage point is another stream (:func:`~.streams.stream_numbers`)."""
    check_threshold(stall_threshold_ns)
    # Read once (a generator is walked more than once below), and one file per timeline.
    timelines = list(timelines)
    files = check_files(files, len(timelines))
    subjects, by_stream = subjects_and_edges(timelines, files)
    stalls = attribute_stalls(
        subjects, by_stream, Neighbours.of(subjects), engine, stall_threshold_ns
    )
    seen = StreamsSeen.of(subjects, (v for group in by_stream.values() for v in group))
    return assemble(stalls, seen, engine, stall_threshold_ns, worst)


def check_threshold(stall_threshold_ns: int) -> None:
    """A stall threshold is a finite number of nanoseconds above zero: NaN or infinity
    would find no stall at all, silently."""
    ok = (
        isinstance(stall_threshold_ns, Real)
        and not isinstance(stall_threshold_ns, bool)
        and math.isfinite(stall_threshold_ns)
        and float(stall_threshold_ns) > 0
    )
    if not ok:
        raise ValueError(
            f"stall_threshold_ns must be a finite number of nanoseconds above 0,"
            f" got {stall_threshold_ns!r}"
        )


def check_files(
    files: Iterable[int] | None, timelines: int, *, name: str = "files"
) -> list[int] | None:
    """``files`` as a list, one file number per timeline (``name`` is the parameter)."""
    if files is None:
        return None
    if isinstance(files, str | bytes):
        raise TypeError(f"{name} must be a sequence of file numbers, one per timeline")
    files = list(files)
    if len(files) != timelines:
        raise ValueError(
            f"{name} holds {len(files)} file numbers for {timelines} timelines"
            " (one per timeline, in their order)"
        )
    return files


def attribute_stalls(
    subjects: Sequence[StreamView],
    by_stream: Mapping[int, Sequence[StreamView]],
    neighbours: Neighbours,
    engine: EngineSamples | None,
    stall_threshold_ns: int,
) -> list[AttributedStall]:
    """Every stall of ``subjects``, in their order, and its cause.

    ``by_stream`` holds every view of each subject's stream; ``neighbours`` every subject stream of
    the run, which may be more than ``subjects`` (a part of the run explained apart).
    """
    return [
        stall
        for _, stall in attribute_tagged(
            subjects, by_stream, neighbours, engine, stall_threshold_ns
        )
    ]


def attribute_tagged(
    subjects: Sequence[StreamView],
    by_stream: Mapping[int, Sequence[StreamView]],
    neighbours: Neighbours,
    engine: EngineSamples | None,
    stall_threshold_ns: int,
) -> list[tuple[int, AttributedStall]]:
    """:func:`attribute_stalls`, each stall tagged with its subject's ``index``."""
    sites = find_all_stalls(subjects, stall_threshold_ns)
    reruns = _reruns(by_stream)
    stalls: list[tuple[int, AttributedStall]] = []
    for site, evidence in zip(sites, gather_all(sites, neighbours, by_stream, engine), strict=True):
        verdict = decide(evidence)
        shares, why = split(evidence, verdict)
        stream = site.stream
        wall = stream.wall(site.start_ns)
        stalls.append(
            (
                stream.index,
                AttributedStall(
                    stream=stream.stream,
                    stream_id=stream.stream_id,
                    where=stream.where,
                    event_index=site.event_index,
                    text_index=site.position,
                    start_ns=site.start_ns,
                    end_ns=site.end_ns,
                    cause=shares[0].cause,
                    confidence=shares[0].confidence,
                    evidence="; ".join(filter(None, (verdict.evidence, why))),
                    first_token=site.first_token,
                    started_at=None if wall is None else wall / 1e9,
                    shares=shares,
                    rerun=reruns[stream.stream],
                    engine_read=evidence.engine is not None and evidence.engine.read_any,
                ),
            )
        )
    return stalls


def _reruns(by_stream: Mapping[int, Sequence[StreamView]]) -> dict[int, int]:
    """Each stream's place among the streams of its id (0: the first file's to hold it): what
    pairs it with the lab's truth of a rerun. Stream numbers of one id grow with it
    (:func:`~.streams.stream_numbers`), and ``by_stream`` holds every stream of its ids."""
    numbers: dict[str, list[int]] = {}
    for stream, views in by_stream.items():
        numbers.setdefault(views[0].stream_id, []).append(stream)
    return {stream: k for same in numbers.values() for k, stream in enumerate(sorted(same))}


def assemble(
    stalls: list[AttributedStall],
    seen: StreamsSeen,
    engine: EngineSamples | None,
    stall_threshold_ns: int,
    worst: int,
) -> Explanation:
    """The explanation of a run from its attributed stalls, in the order of its streams."""
    return Explanation(
        stalls=stalls,
        by_cause=_by_cause(stalls),
        hurt=_most_hurt(stalls, worst),
        streams=seen.streams,
        sources=_sources(seen, engine, stalls),
        stall_threshold_ns=stall_threshold_ns,
        notes=_engine_notes(engine, stalls),
    )


def _by_cause(stalls: Sequence[AttributedStall]) -> list[CauseShare]:
    counts: dict[str, int] = {}
    times: dict[str, float] = {}
    for stall in stalls:
        for share in stall.parts:  # a stall counts once for each cause it has a share of
            counts[share.cause] = counts.get(share.cause, 0) + 1
            times[share.cause] = times.get(share.cause, 0.0) + stall.duration_s * share.fraction
    total = sum(times.values())
    shares = [
        CauseShare(cause, counts[cause], times[cause], times[cause] / total, MITIGATIONS[cause])
        for cause in times
    ]
    shares.sort(key=lambda share: (-share.time_s, share.cause))
    return shares


def _most_hurt(stalls: Sequence[AttributedStall], worst: int) -> list[HurtStream]:
    # By stream, not by id: two runs that reuse an id are two streams, listed apart.
    per_stream: dict[int, dict[str, float]] = {}
    counts: dict[int, int] = {}
    ids: dict[int, str] = {}
    for stall in stalls:
        causes = per_stream.setdefault(stall.stream, {})
        for share in stall.parts:
            causes[share.cause] = causes.get(share.cause, 0.0) + stall.duration_s * share.fraction
        counts[stall.stream] = counts.get(stall.stream, 0) + 1
        ids[stall.stream] = stall.stream_id
    hurt = [
        HurtStream(ids[s], counts[s], sum(causes.values()), max(causes, key=causes.__getitem__))
        for s, causes in per_stream.items()
    ]
    hurt.sort(key=lambda stream: (-stream.time_s, stream.stream_id))
    return hurt[:worst]


def _sources(
    seen: StreamsSeen, engine: EngineSamples | None, stalls: Sequence[AttributedStall]
) -> list[str]:
    wheres = sorted(seen.subject_wheres)
    sources = [f"{seen.streams} streams as the {' and '.join(wheres) or 'reader'} saw them"]
    edges = sorted(seen.wheres - seen.subject_wheres)
    if edges:
        sources.append("the same requests at " + ", ".join(edges))
    if engine is not None and len(engine):
        # Scrapes are evidence only where they fell across a stall.
        read = sum(stall.engine_read for stall in stalls)
        over = ""
        if read == 0 and stalls:
            over = ", none across a stall"
        elif read < len(stalls):
            over = f", over {read} of the {len(stalls)} stalls"
        sources.append(f"engine metrics ({len(engine)} scrapes{over})")
    return sources


def _engine_notes(engine: EngineSamples | None, stalls: Sequence[AttributedStall]) -> list[str]:
    """Why the engine metrics said nothing, when they said nothing of any stall: scraped over
    another span of time (a file from another run, or times in another unit)."""
    if engine is None or not len(engine) or not stalls or any(s.engine_read for s in stalls):
        return []
    scraped = f"scraped from {_unix(engine.times_s[0])} to {_unix(engine.times_s[-1])}"
    timed = [s for s in stalls if s.started_at is not None]
    if not timed:
        return [
            f"engine metrics ({len(engine)} scrapes, {scraped}) were not read: no stall has"
            " a wall clock (started_at) to join them by"
        ]
    first = min(s.started_at or 0.0 for s in timed)
    last = max((s.started_at or 0.0) + s.duration_s for s in timed)
    return [
        f"engine metrics ({len(engine)} scrapes, {scraped}) cover none of the"
        f" {len(stalls)} stalls (from {_unix(first)} to {_unix(last)}): a file from another"
        " run, or times not in unix seconds? The causes are read without them"
    ]


def _unix(seconds: float) -> str:
    """A wall-clock instant in UTC, or as unix seconds past what a date holds (ms read as s)."""
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    except (OverflowError, OSError, ValueError):
        return f"unix {seconds:.0f} s"
