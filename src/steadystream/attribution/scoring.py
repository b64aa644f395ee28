"""Score attributions against the lab's ground truth (pure).

The lab records, per event, the main cause of the gap that ends at it (the ``cause``
annotation of its timelines, docs/lab.md#causes) and the delay each cause added to it
(``cause_ns``); a stall is scored by overlap of time, its true shares against its
attributed ones. A stall ending at a stream's k-th text
event is scored against the lab's k-th text event of the same request id: events keep their
order from the lab to the reader, whatever the path groups or delays. A gap the lab charged
to nothing is ``none`` (the lab made no pause there: a long prefill of the stream's own
prompt, or a delay the lab did not make). Time is the stall's duration as the reader saw it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import numpy as np

from steadystream._exceptions import TimelineFormatError
from steadystream._types import Where
from steadystream.attribution.causes import ATTRIBUTABLE
from steadystream.attribution.explain import Explanation
from steadystream.attribution.streams import stream_numbers
from steadystream.timeline import Timeline

__all__ = ["NO_CAUSE", "Score", "score"]

NO_CAUSE = "none"


@dataclass(frozen=True, slots=True)
class Score:
    """A confusion matrix of true cause x attributed cause, in seconds of stall time."""

    seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    stalls: dict[tuple[str, str], int] = field(default_factory=dict)
    unmatched: int = 0  # stalls of requests the truth file does not hold
    unmatched_s: float = 0.0

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def right_s(self) -> float:
        return sum(s for (true, said), s in self.seconds.items() if true == said)

    @property
    def share_right(self) -> float | None:
        """Share of the stall time the lab made (its true cause is one of the lab's) that is
        attributed to that cause; ``unknown`` is wrong. Stalls the lab charged to nothing
        (``none``: its host fell behind, or a long prompt of the stream's own) are left out
        here and counted in :attr:`no_cause_s`."""
        caused = self.total_s - self.no_cause_s
        return self.right_s / caused if caused > 0 else None

    @property
    def no_cause_s(self) -> float:
        """Stall time the lab charged to no cause."""
        return sum(s for (true, _), s in self.seconds.items() if true == NO_CAUSE)

    @property
    def true_causes(self) -> list[str]:
        return _ordered({true for true, _ in self.seconds})

    @property
    def attributed_causes(self) -> list[str]:
        return _ordered({said for _, said in self.seconds})

    def to_json(self) -> dict[str, Any]:
        return {
            "share_right": self.share_right,
            "scored_s": self.total_s,
            "no_cause_s": self.no_cause_s,
            "right_s": self.right_s,
            "unmatched_stalls": self.unmatched,
            "unmatched_s": self.unmatched_s,
            "matrix_s": {
                true: {
                    said: self.seconds[(true, said)]
                    for said in self.attributed_causes
                    if (true, said) in self.seconds
                }
                for true in self.true_causes
            },
        }


def score(
    explanation: Explanation,
    truth: Sequence[Timeline],
    *,
    files: Sequence[int] | None = None,
    paths: Sequence[str | PathLike[str]] | None = None,
) -> Score:
    """Score ``explanation`` against lab timelines carrying the ``cause`` annotation, by
    overlap of time: each stall's true shares (the lab's ``cause_ns``, the delay each cause
    added to the gap; else all of it to ``cause``) against its attributed shares.

    The truth of an id is paired with its explained streams as vantage points are
    (docs/attribution.md#same-stream): the k-th file to hold it with the k-th stream of it
    explained, so two runs that reuse ids are each scored against their own truth.
    ``files`` is the file each truth timeline came from (without it, each lab timeline of an
    id is its next stream: the lab records one per request), ``paths`` names those files in
    messages. A ``cause_ns`` that does not read as ``cause=ns+...`` (each a finite number of
    ns, 0 or more) is a :class:`~steadystream.TimelineFormatError`."""
    causes = _truth_by_stream(truth, files, paths)
    seconds: dict[tuple[str, str], float] = {}
    stalls: dict[tuple[str, str], int] = {}
    unmatched = 0
    unmatched_s = 0.0
    for stall in explanation.stalls:
        truths = causes.get((stall.stream_id, stall.rerun))
        position = stall.text_index
        if truths is None or position >= len(truths):
            unmatched += 1
            unmatched_s += stall.duration_s
            continue
        true = truths[position]
        said: dict[str, float] = {}
        for share in stall.parts:
            said[share.cause] = said.get(share.cause, 0.0) + share.fraction
        for key, part in _overlap(true, said).items():
            seconds[key] = seconds.get(key, 0.0) + part * stall.duration_s
        key = (max(true, key=true.__getitem__), stall.cause)
        stalls[key] = stalls.get(key, 0) + 1
    return Score(seconds, stalls, unmatched, unmatched_s)


def _truth_by_stream(
    truth: Sequence[Timeline],
    files: Sequence[int] | None,
    paths: Sequence[str | PathLike[str]] | None,
) -> dict[tuple[str, int], list[dict[str, float]]]:
    """The lab's shares of each text event's gap, by (request id, which stream of that id),
    every ``cause_ns`` checked first."""
    in_files = files if files is not None else range(len(truth))
    lab = [
        (timeline, file)
        for timeline, file in zip(truth, in_files, strict=True)
        if timeline.where is Where.LAB and "cause" in timeline.annotations
    ]
    numbers = stream_numbers(
        [t.stream_id for t, _ in lab], [t.where.value for t, _ in lab], [f for _, f in lab]
    )
    reruns: dict[str, list[int]] = {}
    causes: dict[tuple[str, int], list[dict[str, float]]] = {}
    for (timeline, file), number in zip(lab, numbers, strict=True):
        same = reruns.setdefault(timeline.stream_id, [])
        if number not in same:
            same.append(number)  # numbers of one id come in the order of its files
        source = None if paths is None or files is None else os.fspath(paths[file])
        main = timeline.annotations["cause"]
        delays = [
            None if entry is None else _delays(entry, timeline.stream_id, i, source)
            for i, entry in enumerate(timeline.annotations.get("cause_ns") or [None] * len(main))
        ]
        text = np.flatnonzero(timeline.text_mask).tolist()
        key = (timeline.stream_id, same.index(number))
        causes[key] = [_true_shares(main[i], delays[i]) for i in text]
    return causes


def _delays(entry: str, stream_id: str, event: int, path: str | None) -> dict[str, float]:
    """One ``cause_ns`` entry (``a=ns+b=ns``) as ns by cause; a :class:`TimelineFormatError`
    naming the file, the stream, the event and the field where it does not read so."""

    def bad(problem: str) -> TimelineFormatError:
        where = f"stream {stream_id!r}, event {event}"
        if path is None:
            where = f"lab truth {where}"
        return TimelineFormatError(
            f"{where}: cause_ns {entry!r}: {problem}", path=path, field="annotations.cause_ns"
        )

    ns: dict[str, float] = {}
    for piece in entry.split("+"):
        cause, equals, value = piece.partition("=")
        if not equals or not cause.strip():
            raise bad(f"{piece!r} is not CAUSE=NANOSECONDS (as in 'queueing=420000000')")
        try:
            delay = float(value)
        except ValueError:
            raise bad(f"the delay of {cause} ({value!r}) is not a number of ns") from None
        if not math.isfinite(delay) or delay < 0:
            raise bad(f"the delay of {cause} ({value!r}) is not a finite number of ns >= 0")
        ns[cause] = ns.get(cause, 0.0) + delay
    if not math.isfinite(sum(ns.values())):
        raise bad("the delays add up past what a number holds")
    return ns


def _true_shares(main: str | None, delays: dict[str, float] | None) -> dict[str, float]:
    """The lab's shares of one gap: from ``cause_ns`` (checked by :func:`_delays`), else all
    to ``cause`` (a gap the lab named no cause for is ``none``, whatever small delays it
    carries)."""
    if main is None:
        return {NO_CAUSE: 1.0}
    if delays:
        ns = {cause: value for cause, value in delays.items() if value > 0}
        total = sum(ns.values())
        if total > 0:
            return {cause: value / total for cause, value in ns.items()}
    return {main: 1.0}


def _overlap(true: dict[str, float], said: dict[str, float]) -> dict[tuple[str, str], float]:
    """Shares of a stall by (true, attributed) cause: where the two agree, the smaller of
    the two on the diagonal; what is left of each spread over the other's rest."""
    out: dict[tuple[str, str], float] = {}
    true_rest, said_rest = dict(true), dict(said)
    for cause in true:
        both = min(true[cause], said.get(cause, 0.0))
        if both > 0:
            out[(cause, cause)] = both
            true_rest[cause] -= both
            said_rest[cause] -= both
    rest = sum(v for v in said_rest.values() if v > 0)
    if rest > 1e-12:
        for a, left in true_rest.items():
            for b, other in said_rest.items():
                if left > 1e-12 and other > 1e-12:
                    out[(a, b)] = out.get((a, b), 0.0) + left * other / rest
    return out


def _ordered(labels: set[str]) -> list[str]:
    order = {label: i for i, label in enumerate((*ATTRIBUTABLE, NO_CAUSE))}
    return sorted(labels, key=lambda label: (order.get(label, len(order)), label))
