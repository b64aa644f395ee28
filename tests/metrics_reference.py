"""A slow, literal reference for the metrics: one stream at a time, plain Python loops.

The vectorised code in steadystream.metrics must agree with this on any input (see
test_metrics_properties.py). Written from docs/metrics.md, not from the vectorised code.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np

from steadystream import EventKind, Timeline, TokenSource
from steadystream.metrics import MetricConfig


def reference(tl: Timeline, cfg: MetricConfig) -> dict[str, float | None]:
    marked = [
        (int(t), int(n), int(b), int(k) == EventKind.REASONING)
        for t, n, b, k, keep in zip(
            tl.times, tl.tokens, tl.text_bytes, tl.kinds, tl.text_mask, strict=True
        )
        if keep
    ]
    ev = [(t, n, b) for t, n, b, _ in marked]
    # The answer (content, tool calls); reasoning is text too, but not the answer.
    visible = [(t, n, b) for t, n, b, reasoning in marked if not reasoning]
    thought = [t for t, _, _, reasoning in marked if reasoning]
    out: dict[str, float | None] = {}
    out["ttfb_s"] = None if tl.first_byte_ns is None else tl.first_byte_ns / 1e9
    out["output_tokens"] = float(sum(n for _, n, _ in ev))
    out["chunks"] = float(len(ev))
    out["ttft_s"] = visible[0][0] / 1e9 if visible else None
    out["ttfr_s"] = thought[0] / 1e9 if thought else None
    if not ev:
        for k in ("e2el_s", "tpot_s", "tokens_per_chunk"):
            out[k] = None
    else:
        out["e2el_s"] = ev[-1][0] / 1e9
        n = out["output_tokens"]
        out["tpot_s"] = (ev[-1][0] - ev[0][0]) / (n - 1) / 1e9 if n >= 2 else None
        out["tokens_per_chunk"] = n / len(ev)
    gaps = [b[0] - a[0] for a, b in pairwise(ev)]
    # An arrival: the first text event, and each one at least 1 ms after the one before.
    out["chunks_per_arrival"] = len(ev) / (1 + sum(g >= 1_000_000 for g in gaps)) if ev else None
    out["gaps"] = float(len(gaps))
    if gaps:
        arr = np.array(gaps, dtype=np.float64)
        for q, name in ((50, "gap_p50_s"), (90, "gap_p90_s"), (95, "gap_p95_s"), (99, "gap_p99_s")):
            out[name] = float(np.percentile(arr, q)) / 1e9
        out["max_gap_s"] = max(gaps) / 1e9
        mean = sum(gaps) / len(gaps)
        out["gap_mean_s"] = mean / 1e9
        out["gap_stdev_s"] = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / 1e9
        out["gap_cv"] = out["gap_stdev_s"] / out["gap_mean_s"] if mean > 0 else None
        p50, p99 = out["gap_p50_s"], out["gap_p99_s"]
        out["jitter_ratio"] = p99 / p50 if p50 > 0 else None
        out["unstable"] = (
            None if out["jitter_ratio"] is None else float(out["jitter_ratio"] > cfg.jitter_flag)
        )
        stalls = [g for g in gaps if g > cfg.stall_threshold_ns]
        out["stall_count"] = float(len(stalls))
        out["stall_time_s"] = sum(stalls) / 1e9
        if stalls:
            j = gaps.index(max(gaps))
            delivered = sum(n for _, n, _ in ev[: j + 1])
            out["longest_stall_token"] = float(delivered)
            tokens_out = out["output_tokens"]  # (none: every event a piece of a token)
            out["longest_stall_fraction"] = delivered / tokens_out if tokens_out else None
        else:
            out["longest_stall_token"] = out["longest_stall_fraction"] = None
    else:
        for k in (
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
        ):
            out[k] = None
    wire = int(tl.wire_bytes.sum())
    text_bytes = sum(b for _, _, b in ev)
    out["envelope_overhead"] = wire / text_bytes if wire > 0 and text_bytes > 0 else None
    out["head_burst"] = _head_burst(ev, visible[0][0] if visible else None, cfg)
    # The reader's tokens are the answer's: its first is the TTFT the models expect.
    tokens = [t for t, n, _ in visible for _ in range(n)]
    out["qoe"] = _qoe(tokens, cfg) if visible else None
    out["fluidity"] = _fluidity(tokens, cfg) if tokens else None
    if tl.token_source is TokenSource.UNKNOWN:  # (no count: nothing counted in tokens)
        for name in (
            "tpot_s",
            "output_tokens",
            "longest_stall_token",
            "longest_stall_fraction",
            "tokens_per_chunk",
            "head_burst",
            "qoe",
            "fluidity",
        ):
            out[name] = None
    return out


def _head_burst(
    ev: list[tuple[int, int, int]], ttft: int | None, cfg: MetricConfig
) -> float | None:
    if ttft is None:
        return None
    end = ttft + cfg.head_window_ns
    head = sum(n for t, n, _ in ev if ttft <= t < end)
    tail = [(b[0] - a[0], b[1]) for a, b in pairwise(ev) if b[0] >= end]
    if not tail:
        return None
    median = float(np.percentile([g for g, _ in tail], 50))
    per_chunk = sum(n for _, n in tail) / len(tail)
    if median <= 0 or per_chunk <= 0:  # (else the steady rate delivers nothing)
        return None
    return head / (cfg.head_window_ns / median * per_chunk)


def _qoe(tokens: list[int], cfg: MetricConfig) -> float | None:
    n = len(tokens)
    if n < 2:
        return None
    pace, expected = cfg.qoe_pace_ns_per_token, cfg.qoe_expected_ttft_ns
    if cfg.qoe_form == "discrete":
        times = [expected, *tokens]
        b = 0.0
        s_actual = 0.0
        for i in range(1, n + 1):
            delta = times[i] - times[i - 1]
            b = max(0.0, b + 1 - delta / pace)
            d = pace if b > 0 else delta
            if i >= 2:
                s_actual += (2 * i - 1) / 2 * d
        ttlt = tokens[-1] + b * pace
        if tokens[-1] < expected + n * pace:
            target = n * n * pace / 2
        else:
            target = n * (2 * ttlt - 2 * expected - n * pace) / 2
        return min(1.0, s_actual / target)
    # The reader model: token i is read by r_i = max(t_i, r_{i-1}) + L, r_0 = T_e.
    read = expected
    reads = []
    for t in tokens:
        read = max(t, read) + pace
        reads.append(read)
    ttlt = reads[-1]
    # Area under each curve from T_e to TTLT: a token read by r adds L/2 + (TTLT - r).
    actual = sum(pace / 2 + (ttlt - r) for r in reads)
    target = sum(pace / 2 + (ttlt - (expected + i * pace)) for i in range(1, n + 1))
    return actual / target


def _fluidity(tokens: list[int], cfg: MetricConfig) -> float:
    slack = 0
    met = misses = 0
    previous = 0
    for i, t in enumerate(tokens):
        gap = t - previous
        previous = t
        deadline = cfg.fluidity_prompt_deadline_ns if i == 0 else cfg.fluidity_decode_deadline_ns
        if gap <= deadline + slack:
            met += 1
            slack = slack + deadline - gap
        else:
            misses += _code_misses(i, gap, slack, cfg) if cfg.fluidity_form == "code" else 1
            slack = 0
    return met / (met + misses)


def _code_misses(i: int, gap: int, slack: int, cfg: MetricConfig) -> int:
    """Deadlines a late token misses in Etalon's code, written as that code writes them.

    Etalon's ``etalon/metrics/metric_utils.py``, ``get_request_level_deadline_miss_rate``: a
    late first token misses its own deadline, then one per decode deadline it overran; a
    later one misses one per decode deadline in its gap less the carried slack.
    """
    decode = cfg.fluidity_decode_deadline_ns
    if i == 0:
        return 1 + (gap - slack - cfg.fluidity_prompt_deadline_ns) // decode
    return (gap - slack) // decode
