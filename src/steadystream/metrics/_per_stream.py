"""Per-stream metrics: what a person watching one stream feels, in numbers.

Pure numpy, no I/O. Every metric is defined once in docs/metrics.md (cited here by its
section, e.g. ``[metrics.md#gaps]``). Computation is vectorised over all streams at once:
events of every stream are concatenated and reduced by segment (see ``segments``), so a
100,000-stream run costs a few hundred numpy calls, not a Python loop per chunk.

A metric that cannot be computed for a stream is NaN in a :class:`StreamTable` column and
None in :class:`StreamMetrics`, never 0: a one-token stream has no gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream._types import TEXT_KINDS, EventKind, Outcome, TokenSource
from steadystream.metrics._config import MetricConfig
from steadystream.metrics._quality import andes_qoe, fluidity
from steadystream.metrics.segments import (
    lindley,
    segment_ids,
    segment_percentiles,
    segment_running_max,
    segment_starts,
    segment_sum,
)
from steadystream.timeline import Timeline

__all__ = [
    "ARRIVAL_WINDOW_NS",
    "STREAM_COLUMNS",
    "StreamMetrics",
    "StreamTable",
    "stream_metrics",
    "stream_table",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NS = 1e9
ARRIVAL_WINDOW_NS = 1_000_000
"""Text events closer than this to the one before arrived together ([metrics.md#chunks])."""
_GAP_PERCENTILES = (50.0, 90.0, 95.0, 99.0, 100.0)
_EXPAND_TOKENS = 1 << 22
_EXPAND_PER_EVENT = 4
"""The experience models take one arrival a token: up to ``_EXPAND_TOKENS`` tokens, or
``_EXPAND_PER_EVENT`` a text event, they are laid out so; past that they run a chunk a step
(:func:`_chunk_quality`), as a file that claims 2**31 tokens in one event would otherwise
take 16 GiB."""
_MAX_READ_NS = 1 << 62
"""A stream's tokens times the pace (or the decode deadline), after the first token's
expected time (or deadline), past this is no reading time int64 nanoseconds hold exactly
(146 years): its QoE and fluidity are NaN."""
# The columns that count tokens (None where the token counts are unknown).
_TOKEN_COLUMNS = (
    "tpot_s",
    "output_tokens",
    "longest_stall_token",
    "longest_stall_fraction",
    "tokens_per_chunk",
    "head_burst",
    "qoe",
    "fluidity",
)


STREAM_COLUMNS = (
    "ttfb_s",
    "ttft_s",
    "ttfr_s",
    "e2el_s",
    "tpot_s",
    "output_tokens",
    "chunks",
    "gaps",
    "gap_p50_s",
    "gap_p90_s",
    "gap_p95_s",
    "gap_p99_s",
    "max_gap_s",
    "gap_mean_s",
    "gap_stdev_s",
    "gap_cv",
    "jitter_ratio",
    "unstable",
    "stall_count",
    "stall_time_s",
    "longest_stall_token",
    "longest_stall_fraction",
    "tokens_per_chunk",
    "chunks_per_arrival",
    "envelope_overhead",
    "head_burst",
    "qoe",
    "fluidity",
)
"""Column names of a :class:`StreamTable`, in display order."""


@dataclass(frozen=True, slots=True)
class StreamMetrics:
    """One stream's metrics; None where undefined (docs/metrics.md#per-stream)."""

    stream_id: str
    outcome: Outcome
    ttfb_s: float | None
    ttft_s: float | None
    ttfr_s: float | None
    e2el_s: float | None
    tpot_s: float | None
    output_tokens: int | None
    chunks: int
    gaps: int
    gap_p50_s: float | None
    gap_p90_s: float | None
    gap_p95_s: float | None
    gap_p99_s: float | None
    max_gap_s: float | None
    gap_mean_s: float | None
    gap_stdev_s: float | None
    gap_cv: float | None
    jitter_ratio: float | None
    unstable: bool | None
    stall_count: int | None
    stall_time_s: float | None
    longest_stall_token: int | None
    longest_stall_fraction: float | None
    tokens_per_chunk: float | None
    chunks_per_arrival: float | None
    envelope_overhead: float | None
    head_burst: float | None
    qoe: float | None
    fluidity: float | None


@dataclass(frozen=True, slots=True)
class StreamTable:
    """Metrics of many streams, one float64 column per metric (NaN = undefined)."""

    stream_ids: list[str]
    outcomes: list[Outcome]
    labels: list[dict[str, str]]
    token_sources: list[str]
    wheres: list[str]  # each stream's vantage point (client, gateway-upstream, lab, ...)
    columns: dict[str, FloatArray]
    gap_values_s: FloatArray  # every stream's gaps, concatenated
    gap_counts: IntArray  # how many gaps each stream has

    def __len__(self) -> int:
        return len(self.stream_ids)

    def column(self, name: str) -> FloatArray:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"no metric {name!r}; known: {', '.join(STREAM_COLUMNS)}") from None

    def row(self, index: int) -> StreamMetrics:
        def real(name: str) -> float | None:
            return _optional(self.columns[name][index])

        def count(name: str) -> int | None:
            v = real(name)
            return None if v is None else int(v)

        unstable = real("unstable")
        return StreamMetrics(
            stream_id=self.stream_ids[index],
            outcome=self.outcomes[index],
            ttfb_s=real("ttfb_s"),
            ttft_s=real("ttft_s"),
            ttfr_s=real("ttfr_s"),
            e2el_s=real("e2el_s"),
            tpot_s=real("tpot_s"),
            output_tokens=count("output_tokens"),  # None: a peer's file kept no count
            chunks=int(self.columns["chunks"][index]),
            gaps=int(self.columns["gaps"][index]),
            gap_p50_s=real("gap_p50_s"),
            gap_p90_s=real("gap_p90_s"),
            gap_p95_s=real("gap_p95_s"),
            gap_p99_s=real("gap_p99_s"),
            max_gap_s=real("max_gap_s"),
            gap_mean_s=real("gap_mean_s"),
            gap_stdev_s=real("gap_stdev_s"),
            gap_cv=real("gap_cv"),
            jitter_ratio=real("jitter_ratio"),
            unstable=None if unstable is None else bool(unstable),
            stall_count=count("stall_count"),
            stall_time_s=real("stall_time_s"),
            longest_stall_token=count("longest_stall_token"),
            longest_stall_fraction=real("longest_stall_fraction"),
            tokens_per_chunk=real("tokens_per_chunk"),
            chunks_per_arrival=real("chunks_per_arrival"),
            envelope_overhead=real("envelope_overhead"),
            head_burst=real("head_burst"),
            qoe=real("qoe"),
            fluidity=real("fluidity"),
        )

    def gaps_of(self, index: int) -> FloatArray:
        start = int(self.gap_counts[:index].sum())
        return self.gap_values_s[start : start + int(self.gap_counts[index])]

    @classmethod
    def concat(cls, tables: Sequence[StreamTable]) -> StreamTable:
        """The tables' streams one after another, as if computed in one go.

        Every per-stream metric depends on its own stream alone, so tables computed apart
        (per file, per process, per host) concatenate to exactly the table of all streams.
        """
        if len(tables) == 1:
            return tables[0]
        return cls(
            stream_ids=[s for t in tables for s in t.stream_ids],
            outcomes=[o for t in tables for o in t.outcomes],
            labels=[labels for t in tables for labels in t.labels],
            token_sources=[s for t in tables for s in t.token_sources],
            wheres=[w for t in tables for w in t.wheres],
            columns={
                name: np.concatenate([np.zeros(0), *(t.columns[name] for t in tables)])
                for name in STREAM_COLUMNS
            },
            gap_values_s=np.concatenate([np.zeros(0), *(t.gap_values_s for t in tables)]),
            gap_counts=np.concatenate(
                [np.zeros(0, dtype=np.int64), *(t.gap_counts for t in tables)]
            ),
        )

    def take(self, indices: Sequence[int] | IntArray) -> StreamTable:
        """The rows at ``indices``, in that order (a group of streams, say)."""
        index = np.asarray(indices, dtype=np.int64)
        starts = segment_starts(self.gap_counts)
        counts = self.gap_counts[index]
        # Each taken row's gaps: its segment of the concatenated gap values.
        positions = np.repeat(starts[index] - segment_starts(counts), counts) + np.arange(
            int(counts.sum())
        )
        rows = index.tolist()
        return StreamTable(
            stream_ids=[self.stream_ids[i] for i in rows],
            outcomes=[self.outcomes[i] for i in rows],
            labels=[self.labels[i] for i in rows],
            token_sources=[self.token_sources[i] for i in rows],
            wheres=[self.wheres[i] for i in rows],
            columns={name: values[index] for name, values in self.columns.items()},
            gap_values_s=self.gap_values_s[positions],
            gap_counts=counts,
        )


def stream_metrics(timeline: Timeline, config: MetricConfig | None = None) -> StreamMetrics:
    """Metrics of one stream (the same vectorised code, over a fleet of one)."""
    return stream_table([timeline], config).row(0)


def stream_table(timelines: Sequence[Timeline], config: MetricConfig | None = None) -> StreamTable:
    """Per-stream metrics of every timeline, computed for all streams at once."""
    cfg = config or MetricConfig()
    if not isinstance(timelines, Sequence):  # (a generator: read once, here)
        timelines = list(timelines)
    n = len(timelines)
    text = _TextEvents.gather(timelines)
    cols: dict[str, FloatArray] = {}
    nan = np.full(n, np.nan)

    # The answer (content, tool calls) and the reasoning before or beside it: TTFT is the
    # answer's first token, TTFR the reasoning's; gaps run over both, as a reader sees them.
    visible = text.where(~text.reasoning)
    has_text = text.counts > 0
    starts = segment_starts(text.counts)
    last = starts + text.counts - 1
    first = text.first_times()
    ttft = visible.first_times()
    e2el = nan.copy()
    e2el[has_text] = text.times[last[has_text]]
    output_tokens = segment_sum(text.tokens, text.counts)

    # [metrics.md#latency]
    cols["ttfb_s"] = (
        np.array(
            [np.nan if t.first_byte_ns is None else t.first_byte_ns for t in timelines],
            dtype=np.float64,
        )
        / _NS
    )
    cols["ttft_s"] = ttft / _NS
    cols["ttfr_s"] = text.where(text.reasoning).first_times() / _NS
    cols["e2el_s"] = e2el / _NS
    with np.errstate(invalid="ignore", divide="ignore"):
        # The decode pace from the first text event on, reasoning included: every token
        # the engine streamed after its first counts.
        cols["tpot_s"] = (
            np.where(output_tokens >= 2, (e2el - first) / (output_tokens - 1), np.nan) / _NS
        )
    cols["output_tokens"] = output_tokens
    cols["chunks"] = text.counts.astype(np.float64)

    # [metrics.md#gaps] gaps between consecutive text events, after the first one
    gap_counts = np.maximum(text.counts - 1, 0)
    not_first = np.ones(len(text.times), dtype=bool)
    not_first[starts[has_text]] = False
    gaps = np.diff(text.times, prepend=0)[not_first]
    cols["gaps"] = gap_counts.astype(np.float64)
    pct_ns = segment_percentiles(gaps, gap_counts, _GAP_PERCENTILES)
    pct = pct_ns / _NS
    for i, name in enumerate(("gap_p50_s", "gap_p90_s", "gap_p95_s", "gap_p99_s", "max_gap_s")):
        cols[name] = pct[:, i]
    has_gaps = gap_counts > 0
    gaps_s = gaps / _NS
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(has_gaps, segment_sum(gaps_s, gap_counts) / gap_counts, np.nan)
        ids = segment_ids(gap_counts)
        var = segment_sum((gaps_s - mean[ids]) ** 2, gap_counts) / gap_counts
        stdev = np.where(has_gaps, np.sqrt(var), np.nan)
        cols["gap_mean_s"] = mean
        cols["gap_stdev_s"] = stdev
        cols["gap_cv"] = np.where(mean > 0, stdev / mean, np.nan)
        # [metrics.md#jitter]
        p50 = cols["gap_p50_s"]
        ratio = np.where(p50 > 0, cols["gap_p99_s"] / p50, np.nan)
    cols["jitter_ratio"] = ratio
    cols["unstable"] = np.where(np.isnan(ratio), np.nan, (ratio > cfg.jitter_flag) * 1.0)

    # [metrics.md#stalls]
    stalled = gaps > cfg.stall_threshold_ns
    stall_count = segment_sum(stalled, gap_counts)
    cols["stall_count"] = np.where(has_gaps, stall_count, np.nan)
    cols["stall_time_s"] = np.where(has_gaps, segment_sum(gaps * stalled, gap_counts) / _NS, np.nan)
    cols["longest_stall_token"], cols["longest_stall_fraction"] = _longest_stall(
        text, gaps, gap_counts, pct_ns[:, -1], stall_count, output_tokens
    )

    # [metrics.md#chunks]
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["tokens_per_chunk"] = np.where(has_text, output_tokens / text.counts, np.nan)
        # An arrival is a text event that came at least the arrival window after the one
        # before it (the first always is one); closer events reached this vantage point in
        # one lump, as a buffering proxy or a lagging reader delivers them.
        arrivals = has_text + segment_sum(gaps >= ARRIVAL_WINDOW_NS, gap_counts)
        cols["chunks_per_arrival"] = np.where(has_text, text.counts / arrivals, np.nan)
        wire = text.wire_bytes
        text_bytes = segment_sum(text.text_bytes, text.counts)
        cols["envelope_overhead"] = np.where(
            (wire > 0) & (text_bytes > 0), wire / text_bytes, np.nan
        )
    cols["head_burst"] = _head_burst(text, gaps, gap_counts, ttft, cfg)

    # [metrics.md#qoe] and [metrics.md#fluidity]: the reader's first token is the answer's
    cols["qoe"], cols["fluidity"] = visible.quality(cfg)

    # [format.md#token-counts] A peer's file that kept no token count: the one token per
    # chunk that holds each event's place is no count, so every metric of tokens is unknown.
    unknown = np.fromiter(
        (t.token_source is TokenSource.UNKNOWN for t in timelines), dtype=bool, count=n
    )
    if unknown.any():
        for name in _TOKEN_COLUMNS:
            cols[name] = np.where(unknown, np.nan, cols[name])

    return StreamTable(
        stream_ids=[t.stream_id for t in timelines],
        outcomes=[t.outcome for t in timelines],
        labels=[t.labels for t in timelines],
        token_sources=[t.token_source.value for t in timelines],
        wheres=[t.where.value for t in timelines],
        columns={name: np.asarray(cols[name], dtype=np.float64) for name in STREAM_COLUMNS},
        gap_values_s=gaps_s,
        gap_counts=gap_counts,
    )


_IS_TEXT_KIND = np.zeros(256, dtype=bool)
_IS_TEXT_KIND[[int(k) for k in TEXT_KINDS]] = True
_REASONING = int(EventKind.REASONING)


@dataclass(frozen=True, slots=True)
class _TextEvents:
    """The text-bearing events of many streams, concatenated (times in ns)."""

    times: IntArray
    tokens: IntArray
    text_bytes: IntArray
    counts: IntArray
    wire_bytes: FloatArray  # every event's wire bytes summed per stream
    reasoning: npt.NDArray[np.bool_]  # which text events are reasoning

    @classmethod
    def gather(cls, timelines: Sequence[Timeline]) -> _TextEvents:
        if not timelines:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, empty, np.zeros(0), np.zeros(0, dtype=bool))
        # One concatenation per field, then every mask and count over the whole run at once.
        event_counts = np.fromiter((len(t) for t in timelines), np.int64, len(timelines))
        kinds = np.concatenate([t.kinds for t in timelines])
        tokens = np.concatenate([t.tokens for t in timelines]).astype(np.int64)
        text_bytes = np.concatenate([t.text_bytes for t in timelines])
        # Timeline.text_mask's rule: a piece of a token (text, no token of its own) counts.
        mask = _IS_TEXT_KIND[kinds] & ((tokens > 0) | (text_bytes > 0))
        return cls(
            times=np.concatenate([t.times for t in timelines])[mask],
            tokens=tokens[mask],
            text_bytes=text_bytes[mask].astype(np.int64),
            counts=segment_sum(mask, event_counts).astype(np.int64),
            wire_bytes=segment_sum(np.concatenate([t.wire_bytes for t in timelines]), event_counts),
            reasoning=kinds[mask] == _REASONING,
        )

    def where(self, keep: npt.NDArray[np.bool_]) -> _TextEvents:
        """The text events ``keep`` marks, still one segment per stream."""
        return _TextEvents(
            times=self.times[keep],
            tokens=self.tokens[keep],
            text_bytes=self.text_bytes[keep],
            counts=segment_sum(keep, self.counts).astype(np.int64),
            wire_bytes=self.wire_bytes,
            reasoning=self.reasoning[keep],
        )

    def first_times(self) -> FloatArray:
        """Each stream's first text event's time (ns); NaN for a stream without one."""
        first = np.full(len(self.counts), np.nan)
        has = self.counts > 0
        first[has] = self.times[segment_starts(self.counts)[has]]
        return first

    def quality(self, cfg: MetricConfig) -> tuple[FloatArray, FloatArray]:
        """Andes QoE and Etalon fluidity of every stream: a k-token chunk is k tokens
        arriving together, laid out one arrival a token while that stays small."""
        counts = segment_sum(self.tokens, self.counts).astype(np.int64)
        total = int(counts.sum())
        if total > max(_EXPAND_TOKENS, _EXPAND_PER_EVENT * len(self.tokens)):
            return _chunk_quality(self.times, self.tokens, self.counts, cfg)
        # one token per chunk: nothing to expand (a piece of a token, 0, is no arrival)
        one_each = bool((self.tokens == 1).all())
        token_times = self.times if one_each else np.repeat(self.times, self.tokens)
        qoe, fluid = andes_qoe(token_times, counts, cfg), fluidity(token_times, counts, cfg)
        inexact = ~_exact(counts, cfg)  # (the recursions wrapped around in int64)
        qoe[inexact] = fluid[inexact] = np.nan
        return qoe, fluid


def _exact(tokens: npt.NDArray[np.generic], cfg: MetricConfig) -> npt.NDArray[np.bool_]:
    """Streams of ``tokens`` tokens whose reading time (or deadlines) int64 holds exactly."""
    reading = tokens.astype(np.float64) * max(
        cfg.qoe_pace_ns_per_token, cfg.fluidity_decode_deadline_ns
    )
    first = max(cfg.qoe_expected_ttft_ns, cfg.fluidity_prompt_deadline_ns)
    return reading + first < _MAX_READ_NS


def _chunk_quality(
    times: IntArray, tokens: IntArray, counts: IntArray, cfg: MetricConfig
) -> tuple[FloatArray, FloatArray]:
    """Andes QoE and Etalon fluidity a chunk a step, as ``_quality`` computes them a token a
    step over the chunks laid out one arrival a token (the tests hold them equal).

    In a chunk every token after the first arrives with no gap: the reader's buffer grows by
    one pace a token and the carried slack by one decode deadline a token (each meets its
    deadline), so the recursions step once a chunk, carrying ``k - 1`` paces or deadlines
    into the next. A chunk of no token (a piece of one) is no arrival of a token.
    """
    keep = tokens > 0
    t, k = times[keep], tokens[keep]
    c = segment_sum(keep, counts).astype(np.int64)
    n = segment_sum(k, c)
    qoe, fluid = np.full(len(c), np.nan), np.full(len(c), np.nan)
    if len(t) == 0:
        return qoe, fluid
    ids, starts = segment_ids(c), segment_starts(c)
    has = c > 0
    first = np.zeros(len(t), dtype=bool)
    first[starts[has]] = True
    last = np.where(has, starts + c - 1, 0)
    cumulative = np.cumsum(k)
    before = cumulative - k - (cumulative - k)[starts[ids]]  # the stream's tokens before it
    carried = np.zeros(len(t), dtype=np.int64)  # tokens after the first of the chunk before
    carried[1:] = k[:-1] - 1
    carried[first] = 0
    pace, expected = cfg.qoe_pace_ns_per_token, cfg.qoe_expected_ttft_ns
    exact = _exact(n, cfg)
    enough = (n >= 2) & exact

    with np.errstate(invalid="ignore", divide="ignore"):
        if cfg.qoe_form == "exact":
            # The lag is its chunk's first token's: later ones arrive no later, read later.
            late = t - expected - before * pace
            lag = np.maximum(segment_running_max(late, c, ids=ids), 0).astype(np.float64)
            final_lag = np.where(enough, lag[last], 0.0)
            value = 1.0 - segment_sum(k * lag, c) / (n * n * pace / 2.0 + n * final_lag)
        else:
            previous = np.empty_like(t)
            previous[1:] = t[:-1]
            previous[first] = expected
            interval = t - previous
            _, buffer_ns = lindley(pace - interval + carried * pace, c)
            digest = np.where(buffer_ns > 0, pace, interval).astype(np.float64)
            index = before + 1  # the chunk's first token's, 1-based
            weight = np.where(index >= 2, (2 * index - 1) / 2.0, 0.0)
            # tokens index+1 .. before+k: digest = pace, weights summing to
            # ((before + k)^2 - index^2) / 2
            rest = pace / 2.0 * (k - 1).astype(np.float64) * (2.0 * before + k + 1)
            s_actual = segment_sum(weight * digest + rest, c)
            t_last = np.where(enough, t[last], 0).astype(np.float64)
            ttlt = t_last + np.where(enough, buffer_ns[last] + (k[last] - 1) * pace, 0)
            on_time = t_last < expected + n * pace
            s_target = np.where(
                on_time, n * n * pace / 2.0, n * (2 * ttlt - 2 * expected - n * pace) / 2.0
            )
            value = np.minimum(1.0, s_actual / s_target)
        qoe[enough] = value[enough]

        decode = cfg.fluidity_decode_deadline_ns
        interval = np.diff(t, prepend=0)
        interval[first] = t[first]
        deadline = np.where(first, cfg.fluidity_prompt_deadline_ns, decode)
        steps = deadline - interval
        slack, _ = lindley(steps + carried * decode, c)
        slack += carried * decode
        missed = slack + steps < 0
        met = n - segment_sum(missed, c)
        if cfg.fluidity_form == "code":
            weight_missed = 1 + (interval - slack - deadline) // decode
            misses = segment_sum(np.where(missed, weight_missed, 0), c)
        else:
            misses = segment_sum(missed, c)
        value = met / (met + misses)
    timed = has & exact
    fluid[timed] = value[timed]
    return qoe, fluid


def _longest_stall(
    text: _TextEvents,
    gaps: IntArray,
    gap_counts: IntArray,
    max_gap: FloatArray,
    stall_count: FloatArray,
    output_tokens: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """Where the longest stall sits: tokens delivered before it, and that share of the stream."""
    n = len(gap_counts)
    token_index = np.full(n, np.nan)
    if len(gaps) == 0:
        return token_index, token_index.copy()
    ids = segment_ids(gap_counts)
    at_max = gaps == max_gap[ids]
    streams, first = np.unique(ids[at_max], return_index=True)
    gap_pos = np.flatnonzero(at_max)[first]  # first occurrence of each stream's max gap
    # Gap j of a stream ends at its text event j + 1; the tokens delivered before it are the
    # stream's tokens up to and including event j.
    stream_start = segment_starts(text.counts)[streams]
    within = gap_pos - segment_starts(gap_counts)[streams]
    event_pos = stream_start + within + 1
    cumulative = np.cumsum(text.tokens)
    before_stream = np.where(stream_start > 0, cumulative[stream_start - 1], 0)
    delivered = cumulative[event_pos - 1] - before_stream
    token_index[streams] = delivered
    token_index[~(stall_count > 0)] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = token_index / output_tokens
    return token_index, fraction


def _head_burst(
    text: _TextEvents, gaps: IntArray, gap_counts: IntArray, ttft: FloatArray, cfg: MetricConfig
) -> FloatArray:
    """Tokens in the first window after TTFT over what the steady rate would have delivered.

    The steady rate is the median gap after the window with its tokens per chunk: robust to a
    stall later in the stream, which would otherwise make any head look like a burst. The
    window opens at the answer's first token: reasoning before it is neither head nor tail.
    """
    window = cfg.head_window_ns
    opens = ttft[segment_ids(text.counts)]  # NaN for a stream with no answer: no head, no tail
    with np.errstate(invalid="ignore"):
        in_head = (text.times >= opens) & (text.times < opens + window)
        after = text.times >= opens + window
    head_tokens = segment_sum(text.tokens * in_head, text.counts)
    # Gap j of a stream ends at its text event j + 1: drop each stream's first event's flags.
    first = segment_starts(text.counts)[text.counts > 0]
    ends_after = np.delete(after, first)
    tail_gaps = gaps[ends_after]
    tail_counts = segment_sum(ends_after, gap_counts).astype(np.int64)
    median_gap = segment_percentiles(tail_gaps, tail_counts, (50.0,))[:, 0]
    tail_tokens = segment_sum(np.delete(text.tokens, first)[ends_after], tail_counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_chunk = tail_tokens / tail_counts
        expected = window / median_gap * per_chunk
        burst = head_tokens / expected
    # A tail of pieces of a token (text, no token of its own) delivers no steady rate either.
    return np.where((tail_tokens > 0) & (median_gap > 0), burst, np.nan)


def _optional(value: np.float64) -> float | None:
    return None if np.isnan(value) else float(value)
