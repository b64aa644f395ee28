"""A second, deliberately plain reading of docs/attribution.md: one stream and one stall at a
time, lists and loops, no numpy. The attribution tests hold the library to it
(tests/attribution/test_reference.py); where the two differ, the doc decides.

What the doc leaves to the code, this reads as the code does, and says so where it is used:
"the middle of the gap" is its middle half; a stream "in flight" is open over that middle half;
"shared" is 60 % or more of the streams asked; the engine was "scraped across" a stall when any
of its engine series (preemptions, prompt tokens, drafts, requests waiting) was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from steadystream import EventKind, Timeline, TokenSource

MS = 1_000_000
ALIGN_NS = 10 * MS  # "within 10 ms of this one's"
TOGETHER_NS = 1 * MS  # "text events arriving within 1 ms of each other arrived together"
LUMP_MIN, LUMP_FACTOR, BUFFERED = 3, 3.0, 2.5
HEAD_LUMP, HEAD_ALIKE = 5, 0.2
SHARED = 0.6
SAMPLE = 64
SPEC_PER_CHUNK = 1.3
PREFILL_TOKENS = 1000
ONE_STEP_NS = 1_000_000_000
LOW_ACCEPTANCE = 0.6
STARVED_S = 0.05
BEFORE_S, AFTER_S = 0.15, 0.05
SPLIT_NS, SPLIT_SHARE = 35 * MS, 0.05
TEXT_KINDS = (EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL)
RANKS = {"lab": 0, "gateway-upstream": 1, "gateway-downstream": 2, "client": 3}
WALL_LIMIT_S = 9e9  # the library's bound: unix seconds whose ns fit in 64 bits

PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT = "vllm:prompt_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
WAITING = "vllm:num_requests_waiting"
KV = "vllm:kv_cache_usage_perc"
LAG_RESETS = "lab:scheduling_lag_resets_total"
LAG_SUM = "lab:scheduling_lag_seconds_sum"
LAG_COUNT = "lab:scheduling_lag_seconds_count"
INJECTED = "lab:injected_faults_total"

Scrapes = list[tuple[float, dict[str, float]]]


@dataclass
class View:
    index: int
    number: int  # which stream (its other vantage points share it)
    stream_id: str
    where: str
    rank: int
    times: list[int]  # text events, ns from the request
    events: list[int]  # their indices among all events
    tokens: list[int]
    wall0: int | None
    counted: bool


@dataclass
class Stall:
    stream: int
    stream_id: str
    where: str
    event_index: int
    text_index: int
    start_ns: int
    end_ns: int
    first_token: bool
    cause: str
    confidence: float
    shares: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


# -- streams -------------------------------------------------------------------------------


def view_of(index: int, number: int, timeline: Timeline) -> View:
    times, events, tokens = [], [], []
    for i in range(len(timeline.times)):
        kind = int(timeline.kinds[i])
        carries = int(timeline.tokens[i]) > 0 or int(timeline.text_bytes[i]) > 0
        if kind in TEXT_KINDS and carries:
            times.append(int(timeline.times[i]))
            events.append(i)
            tokens.append(int(timeline.tokens[i]))
    started = timeline.started_at
    wall0 = None
    if started is not None and math.isfinite(started) and abs(started) < WALL_LIMIT_S:
        wall0 = round(started * 1e9)
        if times and not abs(wall0 + times[-1]) < WALL_LIMIT_S * 1e9:
            wall0 = None  # its last text event on the wall clock is past 64 bits
    where = timeline.where.value
    return View(
        index=index,
        number=number,
        stream_id=timeline.stream_id,
        where=where,
        rank=RANKS.get(where, 4),
        times=times,
        events=events,
        tokens=tokens,
        wall0=wall0,
        counted=timeline.token_source not in (TokenSource.ESTIMATED, TokenSource.UNKNOWN),
    )


def numbers(timelines: list[Timeline], files: list[int]) -> list[int]:
    """The same stream: one id in one file, or at different vantage points; the k-th file to
    hold an id at a vantage point joins the k-th at each other."""
    kth: dict[tuple[str, str], int] = {}
    last_file: dict[tuple[str, str], int] = {}
    number_of: dict[tuple[str, int], int] = {}
    out = []
    for timeline, file in zip(timelines, files, strict=True):
        key = (timeline.stream_id, timeline.where.value)
        if key in last_file and last_file[key] != file:
            kth[key] = kth.get(key, 0) + 1
        last_file[key] = file
        which = (timeline.stream_id, kth.get(key, 0))
        if which not in number_of:
            number_of[which] = len(number_of)
        out.append(number_of[which])
    return out


def arrivals(times: list[int]) -> list[int]:
    sizes: list[int] = []
    for i, t in enumerate(times):
        if i and t - times[i - 1] < TOGETHER_NS:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


def median(values: list[int]) -> float:
    if not values:
        return 1.0
    ordered = sorted(values)
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2


def lump_after(times: list[int], position: int) -> int:
    end = position + 1
    while end < len(times) and times[end] - times[end - 1] < TOGETHER_NS:
        end += 1
    return end - position


def silent(
    wall0: int, times: list[int], start: int, end: int, *, from_request: bool
) -> bool | None:
    """No text event strictly inside the wall-clock window (True), one (False), or cannot say
    (None: no events, or not open across the window)."""
    if not times:
        return None
    a, b = start - wall0, end - wall0
    if any(a < t < b for t in times):
        return False
    opened = 0 if from_request else times[0]
    if opened > a or times[-1] < b:
        return None
    return True


def longest_silence(wall0: int, times: list[int], start: int, end: int) -> int:
    marks = [start] + [wall0 + t for t in times if start < wall0 + t < end] + [end]
    return max(marks[i + 1] - marks[i] for i in range(len(marks) - 1))


# -- evidence ------------------------------------------------------------------------------


@dataclass
class Reading:
    values: dict[str, float | None]

    def __getitem__(self, name: str) -> float | None:
        return self.values.get(name)

    @property
    def covered(self) -> bool:
        return any(self[n] is not None for n in (PREEMPTIONS, PROMPT, DRAFTS, WAITING))

    @property
    def starved(self) -> bool:
        lag_sum, lag_count = self[LAG_SUM], self[LAG_COUNT]
        mean = None if lag_sum is None or not lag_count else lag_sum / lag_count
        return bool(self[LAG_RESETS]) or (mean or 0.0) >= STARVED_S


def increase(scrapes: Scrapes, name: str, lo: float, hi: float) -> float | None:
    """From the last scrape at or before ``lo`` to the first at or after ``hi``; a counter
    that goes down between two scrapes was reset, as Prometheus reads it."""
    if not any(name in values for _, values in scrapes):
        return None
    before = [i for i, (t, _) in enumerate(scrapes) if t <= lo]
    after = [i for i, (t, _) in enumerate(scrapes) if t >= hi]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    last = scrapes[b][1].get(name)
    if last is None or not math.isfinite(last):
        return None
    total = 0.0
    previous = 0.0  # the last value scraped before: none, a counter that counted nothing
    for i in range(a + 1):
        value = scrapes[i][1].get(name)
        if value is not None and math.isfinite(value):
            previous = value
    for i in range(a + 1, b + 1):
        value = scrapes[i][1].get(name)
        if value is None or not math.isfinite(value):
            continue  # a scrape without the series
        total += value - previous if value >= previous else value
        previous = value
    return total


def peak(scrapes: Scrapes, name: str, lo: float, hi: float) -> float | None:
    seen = [v[name] for t, v in scrapes if lo <= t <= hi and name in v and math.isfinite(v[name])]
    return max(seen) if seen else None


def reading(scrapes: Scrapes, start_ns: int, end_ns: int) -> Reading:
    lo, hi = start_ns / 1e9 - BEFORE_S, end_ns / 1e9 + AFTER_S
    counters = (PREEMPTIONS, PROMPT, DRAFTS, DRAFT_TOKENS, ACCEPTED)
    counters += (LAG_RESETS, LAG_SUM, LAG_COUNT, INJECTED)
    values: dict[str, float | None] = {n: increase(scrapes, n, lo, hi) for n in counters}
    values[WAITING] = peak(scrapes, WAITING, lo, hi)
    values[KV] = peak(scrapes, KV, lo, hi)
    return Reading(values)


@dataclass
class Evidence:
    lump: int
    usual: float
    shared: float | None
    common: int | None
    missing_at: str | None
    present_at: str  # the vantage point nearest the engine that saw it
    engine: Reading | None
    head_share: float
    head_others: int
    head_alike: int


def in_flight(
    fleet: list[View], me: View, start: int, end: int, first_token: bool
) -> tuple[float | None, int | None]:
    """The share of the other streams in flight that paused with the stall (None: none to
    ask) and the common silence (None: none asked)."""
    quarter = (end - start) // 4
    lo, hi = start + quarter, end - quarter
    candidates = []
    for v in fleet:
        if v.wall0 is None or not v.times:
            continue
        opened = v.wall0 if first_token else v.wall0 + v.times[0]
        if opened <= lo and v.wall0 + v.times[-1] >= hi:
            candidates.append(v)
    if len(candidates) > SAMPLE:  # an evenly spread sample, as np.linspace picks them
        n = len(candidates)
        picks = [int(k * ((n - 1) / (SAMPLE - 1))) for k in range(SAMPLE - 1)] + [n - 1]
        candidates = [candidates[p] for p in picks]
    paused = asked = 0
    silences = []
    for v in candidates:
        if v.index == me.index:
            continue
        w, t = v.wall0, v.times
        assert w is not None
        middle = silent(w, t, lo, hi, from_request=first_token)
        if middle is None:
            continue
        asked += 1
        if not first_token:
            silences.append(longest_silence(w, t, start, end))
        if not middle:
            continue
        resumed = (
            silent(w, t, end - ALIGN_NS, end + ALIGN_NS, from_request=first_token) is False
            and silent(w, t, lo, end - ALIGN_NS, from_request=first_token) is True
        )
        stopped = (
            not first_token
            and silent(w, t, start - ALIGN_NS, start + ALIGN_NS, from_request=False) is False
            and silent(w, t, start + ALIGN_NS, hi, from_request=False) is True
        )
        paused += resumed or stopped
    common = None
    if silences:
        silences.sort(reverse=True)
        common = silences[math.ceil(SHARED * len(silences)) - 1]
    return (paused / asked if asked else None), common


def placed(edges: list[View], me: View, start: int, end: int) -> tuple[str | None, str]:
    """The nearest vantage point engine-side that did not see the gap, over its middle half,
    and the one nearest the engine that saw it further out (``me`` where no edge did)."""
    quarter = (end - start) // 4
    lo, hi = start + quarter, end - quarter
    inner = me.where
    for edge in sorted(edges, key=lambda e: -e.rank):  # nearest the reader first
        if edge.rank >= me.rank or edge.wall0 is None:
            continue
        verdict = silent(edge.wall0, edge.times, lo, hi, from_request=True)
        if verdict is False:
            return edge.where, inner
        if verdict is True:
            inner = edge.where
    return None, inner


# -- rules and shares ----------------------------------------------------------------------


def decide(ev: Evidence, first_token: bool, duration: int, me: View) -> tuple[str, float]:
    eng = ev.engine
    shared = ev.shared is not None and ev.shared >= SHARED
    if ev.missing_at is not None:  # 1, 1b
        if ev.missing_at == "gateway-upstream" and ev.present_at == "gateway-downstream":
            return "unknown", 0.0
        return by_shape(ev), 0.95
    if eng is not None and eng[INJECTED]:  # 1c
        return "injected-fault", 0.8
    if first_token:
        if ev.lump >= HEAD_LUMP:
            if ev.head_others >= 2 and ev.head_share > 0.5:
                return "head-burst", 0.85  # 2
            if ev.head_alike >= 2:
                return "head-burst", 0.75  # 2a
            return "connection-hiccup", 0.6  # 2b
        prefill = None if eng is None else eng[PROMPT]
        if duration < ONE_STEP_NS and shared:  # 3
            return "prefill-interference", 0.85 if (prefill or 0) >= PREFILL_TOKENS else 0.65
        waited = None if eng is None else eng[WAITING]
        if waited:
            return "queueing", 0.9  # 4
        return "queueing", 0.4 if waited is not None else 0.6  # 5
    lumped = ev.lump >= LUMP_MIN and (ev.lump >= LUMP_FACTOR * ev.usual or ev.usual >= BUFFERED)
    if lumped and not shared:
        return by_shape(ev), 0.8  # 6
    if eng is not None and eng.covered:
        spike = (eng[PROMPT] or 0) >= PREFILL_TOKENS
        if eng[PREEMPTIONS]:
            return "kv-preemption", 0.9  # 7
        if shared and eng.starved and not spike:
            return "unknown", 0.0  # 8
        if shared and spike:
            return "prefill-interference", 0.9  # 9
        if eng[DRAFTS]:  # 10 (before 9 without a prefill: see the doc)
            return "spec-decode-rejection", 0.6 if acceptance_high(eng) else 0.8
        if shared or spike:
            return "prefill-interference", 0.6  # 9, 11
        if eng.starved:
            return "unknown", 0.0  # 12
        return "connection-hiccup", 0.4  # 13
    if shared:
        return "prefill-interference", 0.75  # 9
    if me.counted and me.tokens and sum(me.tokens) / len(me.tokens) >= SPEC_PER_CHUNK:
        return "spec-decode-rejection", 0.6  # 14
    return "kv-preemption", 0.5  # 15


def acceptance_high(eng: Reading) -> bool:
    drafted = eng[DRAFT_TOKENS]
    return bool(drafted) and (eng[ACCEPTED] or 0.0) / drafted >= LOW_ACCEPTANCE  # type: ignore[operator]


def by_shape(ev: Evidence) -> str:
    return "network-buffering" if ev.usual >= BUFFERED else "connection-hiccup"


NEVER_SPLIT = {"network-buffering", "connection-hiccup", "head-burst"}


def split(
    ev: Evidence, verdict: tuple[str, float], first_token: bool, duration: int, me: View
) -> list[tuple[str, float, float]]:
    whole = [(verdict[0], 1.0, verdict[1])]
    if first_token or ev.missing_at is not None or ev.common is None:
        return whole
    if verdict[0] in NEVER_SPLIT | {"queueing", "injected-fault", "unknown"}:
        return whole
    eng = ev.engine if ev.engine is not None and ev.engine.covered else None
    common = min(ev.common, duration)
    own = duration - common
    least = max(SPLIT_NS, SPLIT_SHARE * duration)
    if common < least:
        return whole
    shared_cause: tuple[str, float] | None = None
    if eng is not None:
        if (eng[PROMPT] or 0) >= PREFILL_TOKENS:
            shared_cause = ("prefill-interference", 0.9)
        elif eng.starved:
            shared_cause = ("unknown", 0.0)
    elif ev.shared is not None and ev.shared >= SHARED:
        shared_cause = ("prefill-interference", 0.75)
    elif common * 2 >= duration:
        shared_cause = ("prefill-interference", 0.6)
    if own < least:
        if shared_cause is None or shared_cause[0] == verdict[0]:
            return whole
        return [(shared_cause[0], 1.0, shared_cause[1])]
    own_cause: tuple[str, float] | None = None
    if eng is not None:
        if eng[PREEMPTIONS]:
            own_cause = ("kv-preemption", 0.9)
        elif eng[DRAFTS]:
            own_cause = ("spec-decode-rejection", 0.6 if acceptance_high(eng) else 0.8)
    elif me.counted and me.tokens and sum(me.tokens) / len(me.tokens) >= SPEC_PER_CHUNK:
        own_cause = ("spec-decode-rejection", 0.6)
    if shared_cause is None or own_cause is None or shared_cause[0] == own_cause[0]:
        return whole
    parts = [
        (shared_cause[0], common / duration, shared_cause[1]),
        (own_cause[0], own / duration, own_cause[1]),
    ]
    parts.sort(key=lambda p: -p[1])
    return parts


# -- the whole run -------------------------------------------------------------------------


def explain(
    timelines: list[Timeline],
    *,
    threshold_ns: int,
    scrapes: Scrapes | None = None,
    files: list[int] | None = None,
) -> list[Stall]:
    scrapes = sorted(scrapes, key=lambda s: s[0]) if scrapes is not None else None
    in_files = files if files is not None else [0] * len(timelines)
    nums = numbers(timelines, in_files)
    views = [view_of(i, n, t) for i, (t, n) in enumerate(zip(timelines, nums, strict=True))]
    outer: dict[int, int] = {}
    for v in views:
        outer[v.number] = max(outer.get(v.number, -1), v.rank)
    subjects = [v for v in views if v.rank == outer[v.number]]
    fleet = [v for v in subjects if v.times]
    heads = [arrivals(v.times)[0] for v in fleet]
    stalls = []
    for me in subjects:
        t = me.times
        usual = median(arrivals(t))
        gaps = []
        if t and t[0] > threshold_ns:
            gaps.append((0, 0, t[0]))
        gaps += [(k, t[k - 1], t[k]) for k in range(1, len(t)) if t[k] - t[k - 1] > threshold_ns]
        for position, start, end in gaps:
            first = position == 0
            lump = lump_after(t, position)
            others = max(len(fleet) - 1, 0)
            lumped = max(sum(h >= HEAD_LUMP for h in heads) - (lump >= HEAD_LUMP), 0)
            alike = 0
            if first and lump >= HEAD_LUMP:
                near = [h for h in heads if h >= HEAD_LUMP]
                near = [h for h in near if lump * (1 - HEAD_ALIKE) <= h <= lump * (1 + HEAD_ALIKE)]
                alike = max(len(near) - 1, 0)
            ev = Evidence(
                lump,
                usual,
                None,
                None,
                None,
                me.where,
                None,
                lumped / others if others else 0.0,
                others,
                alike,
            )
            if me.wall0 is not None:
                ws, we = me.wall0 + start, me.wall0 + end
                ev.shared, ev.common = in_flight(fleet, me, ws, we, first)
                edges = [v for v in views if v.number == me.number]
                ev.missing_at, ev.present_at = placed(edges, me, ws, we)
                if scrapes:
                    ev.engine = reading(scrapes, ws, we)
            verdict = decide(ev, first, end - start, me)
            shares = split(ev, verdict, first, end - start, me)
            stalls.append(
                Stall(
                    stream=me.number,
                    stream_id=me.stream_id,
                    where=me.where,
                    event_index=me.events[position],
                    text_index=position,
                    start_ns=start,
                    end_ns=end,
                    first_token=first,
                    cause=shares[0][0],
                    confidence=shares[0][2],
                    shares=shares,
                )
            )
    return stalls


def by_cause(stalls: list[Stall]) -> list[tuple[str, int, float, float]]:
    """(cause, stalls with a share of it, time, share of all) most time first."""
    counts: dict[str, int] = {}
    times: dict[str, float] = {}
    for s in stalls:
        for cause, fraction, _ in s.shares:
            counts[cause] = counts.get(cause, 0) + 1
            times[cause] = times.get(cause, 0.0) + s.duration_s * fraction
    total = sum(times.values())
    rows = [(c, counts[c], times[c], times[c] / total) for c in times]
    rows.sort(key=lambda r: (-r[2], r[0]))
    return rows


def most_hurt(stalls: list[Stall], worst: int) -> list[tuple[str, int, float, str]]:
    per: dict[int, dict[str, float]] = {}
    counts: dict[int, int] = {}
    ids: dict[int, str] = {}
    for s in stalls:
        causes = per.setdefault(s.stream, {})
        for cause, fraction, _ in s.shares:
            causes[cause] = causes.get(cause, 0.0) + s.duration_s * fraction
        counts[s.stream] = counts.get(s.stream, 0) + 1
        ids[s.stream] = s.stream_id
    rows = []
    for number, causes in per.items():
        top = max(causes.values())
        cause = next(c for c, v in causes.items() if v == top)
        rows.append((ids[number], counts[number], sum(causes.values()), cause))
    rows.sort(key=lambda r: (-r[2], r[0]))
    return rows[:worst]


def prometheus(stalls: list[Stall], labels: tuple[str, ...]) -> dict[str, tuple[float, int]]:
    """Stall seconds from the shares, and stalls by their largest share, for every label."""
    out: dict[str, Any] = {label: [0.0, 0] for label in labels}
    for s in stalls:
        out[s.cause][1] += 1
        for cause, fraction, _ in s.shares:
            out[cause][0] += fraction * s.duration_s
    return {label: (seconds, count) for label, (seconds, count) in out.items()}
