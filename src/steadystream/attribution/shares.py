"""A stall's time split among its causes, each share with how sure it is (pure).

One gap often holds two causes: a decode step another request's prefill stretched for every
stream, and this stream's own loss on top of it (a run of rejected drafts, a preemption).
The neighbours tell the two parts apart: the *common* part is the longest stretch of the gap
that most streams in flight were silent through too (:attr:`Evidence.common_ns`); the rest
is the stream's own. Each part gets the cause its evidence names; a part with no evidence of
its own, or too short to matter, is not split off, and the stall stays one cause (the rules'
verdict). docs/attribution.md#shares has the rules and their confidences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steadystream._causes import Cause
from steadystream._types import TokenSource
from steadystream._units import format_duration
from steadystream.attribution.causes import UNKNOWN
from steadystream.attribution.evidence import Evidence
from steadystream.attribution.rules import (
    LOW_ACCEPTANCE,
    PREFILL_SPIKE_TOKENS,
    SHARED_SHARE,
    SPEC_TOKENS_PER_CHUNK,
    Verdict,
)

__all__ = ["SPLIT_MIN_NS", "SPLIT_MIN_SHARE", "Share", "split"]

SPLIT_MIN_NS = 35000000  # a part shorter than this is not split off (a step's jitter)
SPLIT_MIN_SHARE = 0.05  # ... nor one under this share of the stall
COMMON_MOST = 0.5  # without engine metrics: a common part this much of the stall is shared
# Causes that hold a whole gap on their own (the path, the head): never split.
_WHOLE = frozenset(
    (
        str(Cause.NETWORK_BUFFERING),
        str(Cause.CONNECTION_HICCUP),
        str(Cause.HEAD_BURST),
        str(Cause.QUEUEING),
        str(Cause.INJECTED_FAULT),
        UNKNOWN,
    )
)


@dataclass(frozen=True, slots=True)
class Share:
    """A part of one stall's time charged to one cause, and how sure that is."""

    cause: str
    fraction: float  # of the stall's duration
    confidence: float

    def to_json(self, duration_s: float) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "share": round(self.fraction, 4),
            "time_s": duration_s * self.fraction,
            "confidence": round(self.confidence, 3),
        }


def split(ev: Evidence, verdict: Verdict) -> tuple[tuple[Share, ...], str]:
    """The shares of the stall in ``ev`` (largest first) and, when split, why in words."""
    whole = (Share(verdict.cause, 1.0, verdict.confidence),), ""
    site = ev.site
    if site.first_token or ev.missing_at is not None or ev.common_ns is None:
        return whole
    if verdict.cause in _WHOLE:
        return whole
    duration = site.duration_ns
    common = min(ev.common_ns, duration)
    own = duration - common
    least = max(SPLIT_MIN_NS, SPLIT_MIN_SHARE * duration)
    if common < least:
        return whole
    shared_part = _shared_cause(ev)
    if own < least:
        # Every stream in flight was silent through (nearly) all of it: one stretched step,
        # whatever this stream's own counters say (the rules read drafts without a shared
        # pause when the streams did not pause and resume within a step of each other).
        if shared_part is None or shared_part[0] == verdict.cause:
            return whole
        said = (
            f"most streams in flight were silent through {format_duration(common)} of it"
            f" too: {shared_part[0]}"
        )
        return (Share(shared_part[0], 1.0, shared_part[1]),), said
    own_part = _own_cause(ev)
    if shared_part is None or own_part is None or shared_part[0] == own_part[0]:
        return whole
    parts = [
        Share(shared_part[0], common / duration, shared_part[1]),
        Share(own_part[0], own / duration, own_part[1]),
    ]
    parts.sort(key=lambda share: -share.fraction)
    said = (
        f"split: {format_duration(common)} that most streams in flight were silent through"
        f" too ({shared_part[0]}), {format_duration(own)} its own ({own_part[0]})"
    )
    return tuple(parts), said


def _shared_cause(ev: Evidence) -> tuple[str, float] | None:
    """The cause of the part every stream waited through: a stretched step."""
    engine = ev.engine
    if engine is not None and engine.covered:
        if (engine.prompt_tokens or 0) >= PREFILL_SPIKE_TOKENS:
            return str(Cause.PREFILL_INTERFERENCE), 0.9
        if engine.starved:
            return UNKNOWN, 0.0
        return None  # no long prefill: streams may pause together by chance
    if ev.shared is not None and ev.shared >= SHARED_SHARE:
        return str(Cause.PREFILL_INTERFERENCE), 0.75
    if ev.common_ns is not None and ev.common_ns >= COMMON_MOST * ev.site.duration_ns:
        # Most streams silent through most of it, if not paused and resumed within a step
        # of it (speculative decoding moves each stream's resumption by its own drafts).
        return str(Cause.PREFILL_INTERFERENCE), 0.6
    return None


def _own_cause(ev: Evidence) -> tuple[str, float] | None:
    """The cause of the part this stream waited alone."""
    engine = ev.engine
    if engine is not None and engine.covered:
        if engine.preemptions:
            return str(Cause.KV_PREEMPTION), 0.9
        if engine.drafts:
            rate = None
            if engine.draft_tokens:
                rate = (engine.accepted or 0.0) / engine.draft_tokens
            return str(Cause.SPEC_DECODE_REJECTION), (
                0.8 if rate is None or rate < LOW_ACCEPTANCE else 0.6
            )
        return None
    stream = ev.site.stream
    per_chunk = stream.tokens_per_chunk
    counted = stream.token_source not in (TokenSource.ESTIMATED, TokenSource.UNKNOWN)
    if counted and per_chunk is not None and per_chunk >= SPEC_TOKENS_PER_CHUNK:
        return str(Cause.SPEC_DECODE_REJECTION), 0.6
    return None
