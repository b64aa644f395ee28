"""What is known about one stall, gathered from every source at hand (pure; no I/O).

Three sources, each optional: the subject stream and its neighbours (client timelines
alone), the other vantage points of the same request (joined by request id and wall time),
and engine metrics scraped during the run (joined by wall time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream._types import Where
from steadystream.attribution.clocks import StreamClocks
from steadystream.attribution.engine import (
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
from steadystream.attribution.streams import StallSite, StreamView, silent_between

__all__ = ["ALIGN_NS", "HEAD_LUMP", "EngineReading", "Evidence", "Neighbours", "gather"]

IntArray = npt.NDArray[np.int64]

HEAD_LUMP = 5  # text events released at once with the first token: a held head
STARVED_LAG_S = 0.05  # the lab's steps starting this late on average: its host is short of CPU
ALIGN_NS = 10_000_000  # streams resuming this close together ended one and the same step
MAX_NEIGHBOURS = 64  # streams asked whether they paused with a stall (a sample beyond that)

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

    @classmethod
    def over(cls, samples: EngineSamples, start_s: float, end_s: float) -> EngineReading:
        lo, hi = start_s - _BEFORE_S, end_s + _AFTER_S
        return cls(
            preemptions=samples.increase(PREEMPTIONS, lo, hi),
            prompt_tokens=samples.increase(PROMPT_TOKENS, lo, hi),
            drafts=samples.increase(SPEC_DRAFTS, lo, hi),
            draft_tokens=samples.increase(SPEC_DRAFT_TOKENS, lo, hi),
            accepted=samples.increase(SPEC_ACCEPTED, lo, hi),
            waiting_peak=samples.peak(WAITING, lo, hi),
            kv_peak=samples.peak(KV_USAGE, lo, hi),
            lag_resets=samples.increase(LAG_RESETS, lo, hi),
            lag_mean_s=_ratio(
                samples.increase(LAG_SUM, lo, hi), samples.increase(LAG_COUNT, lo, hi)
            ),
        )

    @property
    def starved(self) -> bool:
        """Whether the engine's host fell behind: the lab says so in its own metrics."""
        return bool(self.lag_resets) or (self.lag_mean_s or 0.0) >= STARVED_LAG_S

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
    head_lump_share: float  # share of all streams whose first token came in a lump


class Neighbours:
    """The subject streams on the wall clock, to ask which were in flight at an instant."""

    def __init__(self, clocks: StreamClocks) -> None:
        timed = np.flatnonzero(clocks.timed)
        self._clocks = clocks
        self._rows = timed
        self._index = clocks.index[timed]
        walls = clocks.wall0[timed]
        self._sent = walls
        self._first = walls + clocks.times[clocks.offsets[timed]]
        self._last = walls + clocks.times[clocks.offsets[timed + 1] - 1]
        heads = len(clocks)
        lumped = int((clocks.head_lump >= HEAD_LUMP).sum())
        self.head_lump_share = lumped / heads if heads else 0.0

    @classmethod
    def of(cls, subjects: Sequence[StreamView]) -> Neighbours:
        return cls(StreamClocks.of(subjects))

    def stretched_share(
        self, stream: StreamView, start_ns: int, end_ns: int, *, first_token: bool
    ) -> tuple[float | None, int]:
        """The share of the other streams in flight that paused with this one: silent
        through the middle of the gap, and paused or resumed within :data:`ALIGN_NS` of it
        (one engine step, stretched for all; streams that pause each for its own reasons
        start and end at their own times). Before a first token, streams that were still
        waiting for theirs count too, and only the resumption can line up."""
        quarter = (end_ns - start_ns) // 4
        lo, hi = start_ns + quarter, end_ns - quarter
        opened = self._sent if first_token else self._first
        candidates = np.flatnonzero((opened <= lo) & (self._last >= hi))
        if len(candidates) > MAX_NEIGHBOURS:
            # A share is as well told by a sample: a fixed, evenly spread one keeps the cost
            # of a 100,000-stream run bounded and the answer reproducible.
            pick = np.linspace(0, len(candidates) - 1, MAX_NEIGHBOURS).astype(np.int64)
            candidates = candidates[pick]
        stretched = count = 0
        for i in candidates:
            if self._index[i] == stream.index:
                continue  # the stream itself
            other = _Other(int(self._sent[i]), self._clocks.times_of(int(self._rows[i])))
            verdict = other.silent(lo, hi, first_token)
            if verdict is None:
                continue
            count += 1
            if not verdict:
                continue
            # Paused with it: its last event came within ALIGN_NS of this one's, and nothing
            # after that; resumed with it: the mirror image at the other end.
            resumed = (
                other.silent(end_ns - ALIGN_NS, end_ns + ALIGN_NS, first_token) is False
                and other.silent(lo, end_ns - ALIGN_NS, first_token) is True
            )
            paused = (
                not first_token
                and other.silent(start_ns - ALIGN_NS, start_ns + ALIGN_NS, False) is False
                and other.silent(start_ns + ALIGN_NS, hi, False) is True
            )
            stretched += resumed or paused
        return (stretched / count if count else None), count


@dataclass(frozen=True, slots=True)
class _Other:
    """Another stream in flight, as :meth:`Neighbours.stretched_share` asks it."""

    wall0_ns: int
    times: IntArray

    def silent(self, start_ns: int, end_ns: int, from_request: bool) -> bool | None:
        return silent_between(
            self.wall0_ns, self.times, start_ns, end_ns, from_request=from_request
        )


def gather(
    site: StallSite,
    neighbours: Neighbours,
    edges: Sequence[StreamView],
    engine: EngineSamples | None,
) -> Evidence:
    """Evidence about ``site`` from its stream, its neighbours, its other edges and the engine."""
    stream = site.stream
    lump = stream.lump_after(site.position)
    wall_start, wall_end = stream.wall(site.start_ns), stream.wall(site.end_ns)
    shared: float | None = None
    others = 0
    missing_at: Where | None = None
    seen: list[Where] = []
    reading: EngineReading | None = None
    if wall_start is not None and wall_end is not None:
        # The middle half of the gap: edges a step apart still agree on it.
        quarter = (wall_end - wall_start) // 4
        lo, hi = wall_start + quarter, wall_end - quarter
        shared, others = neighbours.stretched_share(
            stream, wall_start, wall_end, first_token=site.first_token
        )
        for edge in reversed(edges):  # nearest the reader first
            if edge.rank >= stream.rank:
                continue
            verdict = edge.silent_between(lo, hi, from_request=True)
            if verdict is None:
                continue
            if verdict:
                seen.append(edge.where)
            else:
                missing_at = edge.where
                break
        if engine is not None and len(engine):
            reading = EngineReading.over(engine, wall_start / 1e9, wall_end / 1e9)
    return Evidence(
        site, lump, shared, others, missing_at, tuple(seen), reading, neighbours.head_lump_share
    )


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole
