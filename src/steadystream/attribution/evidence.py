"""What is known about one stall, gathered from every source at hand (pure; no I/O).

Three sources, each optional: the subject stream and its neighbours (client timelines
alone; :mod:`.neighbours`), the other vantage points of the same request (joined by request
id and wall time), and engine metrics scraped during the run (joined by wall time). Every
stall of a run is gathered at once (:func:`gather_all`): the neighbours and the engine in
whole-array passes, the few other vantage points of each stall's request one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from steadystream._types import Where
from steadystream.attribution.engine import (
    INJECTED_FAULTS,
    KV_USAGE,
    LAG_COUNT,
    LAG_RESETS,
    LAG_SUM,
    PREEMPTIONS,
    PROMPT_TOKENS,
    SPEC_ACCEPTED,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    WAITING,
    EngineSamples,
)
from steadystream.attribution.neighbours import ALIGN_NS, HEAD_LUMP, MAX_NEIGHBOURS, Neighbours
from steadystream.attribution.streams import StallSite, StreamView

__all__ = [
    "ALIGN_NS",
    "HEAD_LUMP",
    "MAX_NEIGHBOURS",
    "EngineReading",
    "Evidence",
    "Neighbours",
    "gather_all",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

STARVED_LAG_S = 0.05  # the lab's steps starting this late on average: its host is short of CPU

# The engine's counters move at step boundaries and are scraped every 100 ms: read them from
# a little before the gap opened (a preemption happens at the boundary that starts it) to a
# little after it closed.
_BEFORE_S = 0.15
_AFTER_S = 0.05


@dataclass(frozen=True, slots=True)
class EngineReading:
    """The engine's counters and gauges over one stall (None: not scraped)."""

    preemptions: float | None
    prompt_tokens: float | None
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    waiting_peak: float | None
    kv_peak: float | None
    lag_resets: float | None  # the lab re-anchored its plan: its host fell behind
    lag_mean_s: float | None  # the lab's mean lag behind its plan per step meanwhile
    injected: float | None = None  # pauses the server injected meanwhile (the replay's count)

    @classmethod
    def over_many(
        cls, samples: EngineSamples, start_s: FloatArray, end_s: FloatArray
    ) -> list[EngineReading]:
        """:meth:`over` for many stalls at once (each series read in one pass)."""
        lo, hi = start_s - _BEFORE_S, end_s + _AFTER_S
        columns = {
            name: samples.increases(name, lo, hi)
            for name in (
                PREEMPTIONS,
                PROMPT_TOKENS,
                SPEC_DRAFTS,
                SPEC_DRAFT_TOKENS,
                SPEC_ACCEPTED,
                LAG_RESETS,
                LAG_SUM,
                LAG_COUNT,
                INJECTED_FAULTS,
            )
        }
        columns[WAITING] = samples.peaks(WAITING, lo, hi)
        columns[KV_USAGE] = samples.peaks(KV_USAGE, lo, hi)
        values = {name: column.tolist() for name, column in columns.items()}
        readings = []
        for i in range(len(lo)):
            row = {
                name: (None if value[i] != value[i] else value[i]) for name, value in values.items()
            }
            readings.append(
                cls(
                    preemptions=row[PREEMPTIONS],
                    prompt_tokens=row[PROMPT_TOKENS],
                    drafts=row[SPEC_DRAFTS],
                    draft_tokens=row[SPEC_DRAFT_TOKENS],
                    accepted=row[SPEC_ACCEPTED],
                    waiting_peak=row[WAITING],
                    kv_peak=row[KV_USAGE],
                    lag_resets=row[LAG_RESETS],
                    lag_mean_s=_ratio(row[LAG_SUM], row[LAG_COUNT]),
                    injected=row[INJECTED_FAULTS],
                )
            )
        return readings

    @property
    def starved(self) -> bool:
        """Whether the engine's host fell behind: the lab says so in its own metrics."""
        return bool(self.lag_resets) or (self.lag_mean_s or 0.0) >= STARVED_LAG_S

    @property
    def read_any(self) -> bool:
        """Whether the scrapes said anything of the stall at all (any series across it)."""
        return any(getattr(self, part.name) is not None for part in fields(self))

    @property
    def covered(self) -> bool:
        """Whether any series was scraped across the stall."""
        return any(
            value is not None
            for value in (self.preemptions, self.prompt_tokens, self.drafts, self.waiting_peak)
        )


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the rules may use about one stall."""

    site: StallSite
    lump: int  # text events that arrived together when the gap closed
    shared: float | None  # share of the other streams in flight stalled by the same step
    others: int  # how many other streams were in flight across the gap
    missing_at: Where | None  # the nearest vantage point engine-side that had no such gap
    seen_at: tuple[Where, ...]  # vantage points engine-side that had it too
    engine: EngineReading | None
    head_lump_share: float  # share of the other streams whose first token came in a lump
    common_ns: int | None = None  # the part of the gap most streams in flight were silent too
    head_alike: int = 0  # other streams whose first token came in a lump of about this size
    head_others: int = 0  # the other streams (with a text event) head_lump_share is among


def gather_all(
    sites: Sequence[StallSite],
    neighbours: Neighbours,
    by_stream: Mapping[int, Sequence[StreamView]],
    engine: EngineSamples | None,
) -> list[Evidence]:
    """Evidence about each stall from its stream, its neighbours, its other edges and the
    engine, for many stalls at once: the neighbours and the engine over all of
    them in whole-array passes, each stall's other edges on its own (a handful)."""
    wall0 = np.array([site.stream.wall0_ns or 0 for site in sites], dtype=np.int64)
    timed = np.array([site.stream.wall0_ns is not None for site in sites], dtype=np.bool_)
    start = wall0 + np.array([site.start_ns for site in sites], dtype=np.int64)
    end = wall0 + np.array([site.end_ns for site in sites], dtype=np.int64)
    at = np.flatnonzero(timed)
    share, others, common = neighbours.in_flight(
        np.array([sites[i].stream.index for i in at.tolist()], dtype=np.int64),
        start[at],
        end[at],
        np.array([sites[i].first_token for i in at.tolist()], dtype=np.bool_),
    )
    readings: Sequence[EngineReading | None] = [None] * len(at)
    if engine is not None and len(engine):
        readings = EngineReading.over_many(engine, start[at] / 1e9, end[at] / 1e9)
    found: list[tuple[float | None, int, EngineReading | None, int | None] | None]
    found = [None] * len(sites)
    for k, i in enumerate(at.tolist()):
        found[i] = (
            None if np.isnan(share[k]) else float(share[k]),
            int(others[k]),
            readings[k],
            None if common[k] < 0 else int(common[k]),
        )
    evidence = []
    for i, site in enumerate(sites):
        stream = site.stream
        lump = stream.lump_after(site.position)
        heads, head_others = neighbours.other_heads_lumped(lump if site.first_token else 0)
        # How the other heads came needs no wall clock: a stream without one asks too.
        alike = neighbours.heads_alike(lump) if site.first_token else 0
        here = found[i]
        if here is None:
            evidence.append(
                Evidence(
                    site,
                    lump,
                    None,
                    0,
                    None,
                    (),
                    None,
                    heads,
                    head_alike=alike,
                    head_others=head_others,
                )
            )
            continue
        missing_at, seen = _placed(site, by_stream[stream.stream], int(start[i]), int(end[i]))
        evidence.append(
            Evidence(
                site,
                lump,
                here[0],
                here[1],
                missing_at,
                seen,
                here[2],
                heads,
                here[3],
                alike,
                head_others,
            )
        )
    return evidence


def _placed(
    site: StallSite, edges: Sequence[StreamView], wall_start: int, wall_end: int
) -> tuple[Where | None, tuple[Where, ...]]:
    """The nearest vantage point engine-side that did not see the gap (None: all that
    could tell did), and those that saw it too, nearest the reader first."""
    stream = site.stream
    # The middle half of the gap: edges a step apart still agree on it.
    quarter = (wall_end - wall_start) // 4
    lo, hi = wall_start + quarter, wall_end - quarter
    seen: list[Where] = []
    for edge in reversed(edges):  # nearest the reader first
        if edge.rank >= stream.rank:
            continue
        verdict = edge.silent_between(lo, hi, from_request=True)
        if verdict is None:
            continue
        if not verdict:
            return edge.where, tuple(seen)
        seen.append(edge.where)
    return None, tuple(seen)


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole
