"""The rules that name a stall's cause from its evidence, strongest evidence first (pure).

Each rule is documented with how sure it is in docs/attribution.md#rules; the confidences
below are those, not probabilities fitted to data. Order matters: a placement on the path
(a vantage point engine-side that did not see the gap) beats the shape of the stream, which
beats the engine's counters, which beat guesses from the stream alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from steadystream._causes import Cause
from steadystream._types import TokenSource, Where
from steadystream._units import format_duration
from steadystream.attribution.causes import UNKNOWN
from steadystream.attribution.evidence import HEAD_LUMP, EngineReading, Evidence

__all__ = ["LUMP_FACTOR", "SHARED_SHARE", "Verdict", "decide"]

HEAD_POLICY_SHARE = 0.5  # above this share of the other streams' heads in lumps: a policy
HEAD_POLICY_OTHERS = 2  # ... among this many others at least (one alone: its connection froze)
HEAD_ALIKE_STREAMS = 2  # ... or this many others' heads in lumps of the same size
ONE_STEP_NS = 1_000_000_000  # a stretched step is shorter than this; a longer wait is queueing
LOW_ACCEPTANCE = 0.6  # draft acceptance under this makes rejections likely
LUMP_MIN = 3  # text events arriving together after a gap: a backlog let go
LUMP_FACTOR = 3.0  # ... and this many times the stream's usual arrival
BUFFERED_STREAM = 2.5  # a stream whose usual arrival holds this many events is buffered
SHARED_SHARE = 0.6  # share of the streams in flight silent too: one stretched engine step
SPEC_TOKENS_PER_CHUNK = 1.3  # counted tokens per chunk above which drafts are being accepted
PREFILL_SPIKE_TOKENS = 1000  # prompt tokens prefilled during the gap: a long prompt came in


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: str
    confidence: float
    evidence: str


def decide(ev: Evidence) -> Verdict:
    """One cause for the stall in ``ev``, how sure, and why in words."""
    site = ev.site
    said: list[str] = []
    if ev.seen_at:
        said.append("also seen at " + ", ".join(w.value for w in ev.seen_at))
    if ev.missing_at is not None:
        return _placed_on_path(ev, said)
    if ev.engine is not None and ev.engine.injected:
        said.append(
            f"the server counted {ev.engine.injected:.0f} injected pause(s) played meanwhile"
            " (a replay with --inject): asked for, not the engine's"
        )
        return _verdict(Cause.INJECTED_FAULT, 0.8, said)
    if site.first_token:
        return _first_token(ev, said)
    stream = site.stream
    # A backlog let go: far more at once than this stream usually gets, or the lumps a
    # buffered stream always comes in.
    usual = stream.typical_arrival
    lumped = ev.lump >= LUMP_MIN and (ev.lump >= LUMP_FACTOR * usual or usual >= BUFFERED_STREAM)
    shared = ev.shared is not None and ev.shared >= SHARED_SHARE
    if lumped and not shared:
        return _network_by_shape(ev, said, 0.8)
    if lumped:
        # One connection freezes alone; every stream getting its backlog at once is the
        # server catching up after a long step.
        said.append(f"{ev.lump} text events at once, as every other stream got them")
    else:
        said.append(
            f"resumed at its usual cadence ({ev.lump} event{'s' if ev.lump > 1 else ''} at once)"
        )
    if shared:
        said.append(
            f"{ev.shared:.0%} of the {ev.others} other streams in flight paused and resumed"
            " with it: one engine step stretched for everyone"
        )
    elif ev.shared is not None:
        said.append(f"this stream's own: {ev.others} others in flight did not pause with it")
    if ev.engine is not None and ev.engine.covered:
        return _by_engine(ev.engine, shared, said)
    if shared:
        return _verdict(Cause.PREFILL_INTERFERENCE, 0.75, said)
    return _from_stream_alone(ev, said)


def _placed_on_path(ev: Evidence, said: list[str]) -> Verdict:
    where = ev.missing_at
    assert where is not None
    # Present from the nearest vantage point outwards that saw it (seen_at: nearest the
    # reader first): absent upstream and present at the downstream edge is the gateway's,
    # whichever vantage point is explained.
    outer = ev.seen_at[-1] if ev.seen_at else ev.site.stream.where
    said.append(f"absent at {where.value}, present at {outer.value}: it arose between them")
    if where is Where.GATEWAY_UPSTREAM and outer is Where.GATEWAY_DOWNSTREAM:
        said.append("that is inside the gateway (pacing or failover), not a cause the lab names")
        return _verdict(UNKNOWN, 0.0, said)
    return _network_by_shape(ev, said, 0.95)


def _network_by_shape(ev: Evidence, said: list[str], confidence: float) -> Verdict:
    stream = ev.site.stream
    said.append(
        f"{ev.lump} text events arrived together when it ended"
        f" (this stream usually gets {stream.typical_arrival:g} at a time)"
    )
    if stream.typical_arrival >= BUFFERED_STREAM:
        said.append("the whole stream comes in lumps: a buffer on the path holds it back")
        return _verdict(Cause.NETWORK_BUFFERING, confidence, said)
    said.append("an otherwise smooth stream froze and then let its backlog go")
    return _verdict(Cause.CONNECTION_HICCUP, confidence, said)


def _first_token(ev: Evidence, said: list[str]) -> Verdict:
    site = ev.site
    said.append(f"before the first token ({format_duration(site.duration_ns)} to it)")
    if ev.lump >= HEAD_LUMP:
        said.append(f"then {ev.lump} text events at once")
        if ev.head_others >= HEAD_POLICY_OTHERS and ev.head_lump_share > HEAD_POLICY_SHARE:
            said.append(
                f"as for {ev.head_lump_share:.0%} of the {ev.head_others} other streams: the"
                " server holds the head and releases it at once"
            )
            return _verdict(Cause.HEAD_BURST, 0.85, said)
        if ev.head_alike >= HEAD_ALIKE_STREAMS:
            said.append(
                f"as {ev.head_alike} other streams' first tokens did, in lumps of about the"
                " same size: the server holds a fixed head and releases it at once"
            )
            return _verdict(Cause.HEAD_BURST, 0.75, said)
        said.append("which few other streams do: a backlog let go after a freeze")
        return _verdict(Cause.CONNECTION_HICCUP, 0.6, said)
    engine = ev.engine
    one_step = site.duration_ns < ONE_STEP_NS
    prefilled = None if engine is None else engine.prompt_tokens
    if one_step and ev.shared is not None and ev.shared >= SHARED_SHARE:
        said.append(
            f"{ev.shared:.0%} of the {ev.others} streams in flight paused and resumed with it:"
            " one engine step stretched for everyone"
        )
        if prefilled is not None and prefilled >= PREFILL_SPIKE_TOKENS:
            said.append(f"the engine prefilled {prefilled:.0f} prompt tokens meanwhile")
            return _verdict(Cause.PREFILL_INTERFERENCE, 0.85, said)
        return _verdict(Cause.PREFILL_INTERFERENCE, 0.65, said)
    waited = None if engine is None else engine.waiting_peak
    if waited:
        said.append(f"up to {waited:.0f} requests waited for admission")
        return _verdict(Cause.QUEUEING, 0.9, said)
    if waited is not None:
        said.append("no request waited for admission")
        return _verdict(Cause.QUEUEING, 0.4, said)
    return _verdict(Cause.QUEUEING, 0.6, said)


def _by_engine(engine: EngineReading, shared: bool, said: list[str]) -> Verdict:
    if engine.preemptions:
        kv = "" if engine.kv_peak is None else f", KV cache up to {engine.kv_peak:.0%}"
        said.append(f"the engine preempted {engine.preemptions:.0f} sequence(s) meanwhile{kv}")
        return _verdict(Cause.KV_PREEMPTION, 0.9, said)
    spike = (engine.prompt_tokens or 0) >= PREFILL_SPIKE_TOKENS
    if spike:
        said.append(f"the engine prefilled {engine.prompt_tokens:.0f} prompt tokens meanwhile")
    if shared and not spike and engine.starved:
        return _starved(engine, said)
    if shared and spike:
        return _verdict(Cause.PREFILL_INTERFERENCE, 0.9, said)
    # With speculative decoding on and acceptance low, many streams sit in runs of rejected
    # drafts at once and pause "together" by chance: without a prefill, drafts explain it.
    if engine.drafts:
        rate = None
        if engine.draft_tokens:
            rate = (engine.accepted or 0.0) / engine.draft_tokens
            said.append(
                f"speculative decoding on: {rate:.0%} of {engine.draft_tokens:.0f} draft"
                " tokens accepted meanwhile"
            )
        else:
            said.append("speculative decoding on")
        sure = 0.8 if rate is None or rate < LOW_ACCEPTANCE else 0.6
        return _verdict(Cause.SPEC_DECODE_REJECTION, sure, said)
    if shared or spike:
        return _verdict(Cause.PREFILL_INTERFERENCE, 0.6, said)
    if engine.starved:
        return _starved(engine, said)
    said.append(
        "the engine's metrics show no preemption, no speculative drafts, no long prefill:"
        " the pause was most likely on the way (a connection that froze briefly)"
    )
    return _verdict(Cause.CONNECTION_HICCUP, 0.4, said)


def _starved(engine: EngineReading, said: list[str]) -> Verdict:
    lag = engine.lag_mean_s or 0.0
    said.append(
        f"the engine fell behind its own schedule (steps {lag * 1000:.0f} ms late on average,"
        f" {engine.lag_resets or 0:.0f} re-anchored): its host was short of CPU, a cause the lab"
        " does not name"
    )
    return _verdict(UNKNOWN, 0.0, said)


def _from_stream_alone(ev: Evidence, said: list[str]) -> Verdict:
    stream = ev.site.stream
    per_chunk = stream.tokens_per_chunk
    counted = stream.token_source not in (TokenSource.ESTIMATED, TokenSource.UNKNOWN)
    if counted and per_chunk is not None and per_chunk >= SPEC_TOKENS_PER_CHUNK:
        said.append(
            f"{per_chunk:.1f} tokens per chunk: accepted drafts arrive several at a time,"
            " so speculative decoding is on and a run of rejected drafts is the likeliest pause"
        )
        return _verdict(Cause.SPEC_DECODE_REJECTION, 0.6, said)
    said.append(
        "an engine pause of this stream alone with no engine metrics to say which:"
        " preemption for KV space is the commonest"
    )
    return _verdict(Cause.KV_PREEMPTION, 0.5, said)


def _verdict(cause: str, confidence: float, said: list[str]) -> Verdict:
    return Verdict(str(cause), confidence, "; ".join(said))
