"""Experience models over token arrival times: Andes QoE and the Etalon fluidity index.

Both run a per-token recursion with a floor at zero (a reader's buffer, a deadline's carried
slack), which ``segments.lindley`` evaluates for every stream at once, in integer
nanoseconds so that a token exactly on its deadline is decided exactly.
Definitions and their differences from the papers: docs/metrics.md#qoe, #fluidity.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from steadystream.metrics._config import MetricConfig
from steadystream.metrics.segments import (
    lindley,
    segment_ids,
    segment_running_max,
    segment_starts,
    segment_sum,
)

__all__ = ["andes_qoe", "fluidity"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def andes_qoe(token_times: IntArray, counts: IntArray, cfg: MetricConfig) -> FloatArray:
    """Andes QoE of every stream, in [0, 1]; NaN for streams under two tokens.

    The reader expects the first token at ``T_e`` and reads one token per ``L``. Token ``i``
    is read by ``r_i = max(t_i, r_{i-1}) + L`` (``r_0 = T_e``): the reader never reads ahead
    of delivery nor faster than their pace. QoE is the area under the read-tokens curve over
    the area under the expected curve (``T_e + i * L``), both up to ``TTLT = r_N``. With the
    lag ``u_i = r_i - T_e - i * L`` (a running maximum, so vectorised), this is
    ``1 - sum(u_i) / (N^2 L / 2 + N u_N)``.

    ``cfg.qoe_form == "discrete"`` gives the issue's discrete form instead (docs/metrics.md#qoe
    says where they differ).
    """
    out = np.full(len(counts), np.nan)
    if len(token_times) == 0:
        return out
    if cfg.qoe_form == "discrete":
        return _andes_qoe_discrete(token_times, counts, cfg)
    pace = cfg.qoe_pace_ns_per_token
    starts = segment_starts(counts)
    ids = segment_ids(counts)
    index = np.arange(len(token_times)) - starts[ids] + 1  # 1-based token index
    late = token_times - cfg.qoe_expected_ttft_ns - (index - 1) * pace
    lag = np.maximum(segment_running_max(late, counts), 0).astype(np.float64)
    enough = counts >= 2
    last = starts + counts - 1
    n = counts.astype(np.float64)
    final_lag = np.where(enough, lag[np.where(enough, last, 0)], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        qoe = 1.0 - segment_sum(lag, counts) / (n * n * pace / 2.0 + n * final_lag)
    out[enough] = qoe[enough]
    return out


def _andes_qoe_discrete(token_times: IntArray, counts: IntArray, cfg: MetricConfig) -> FloatArray:
    """The issue's discrete form, kept for comparison (docs/metrics.md#qoe).

    With ``T_e`` prepended to the token times: buffer
    ``b_i = max(0, b_{i-1} + 1 - (t_i - t_{i-1}) / L)``; ``D_i = L`` while the buffer is
    non-empty (after token ``i`` arrived) else ``t_i - t_{i-1}``;
    ``S_actual = sum_{i>=2} (2i - 1) / 2 * D_i``; ``S_target = N^2 L / 2`` if
    ``t_N < T_e + N L`` else ``N (2 TTLT - 2 T_e - N L) / 2`` with ``TTLT = t_N + b_N L``;
    QoE = ``min(1, S_actual / S_target)``.
    """
    pace = cfg.qoe_pace_ns_per_token
    expected_ttft = cfg.qoe_expected_ttft_ns
    out = np.full(len(counts), np.nan)
    starts = segment_starts(counts)
    nonempty = counts > 0
    previous = np.empty_like(token_times)
    previous[1:] = token_times[:-1]
    previous[starts[nonempty]] = expected_ttft
    interval = token_times - previous
    # The buffer scaled by L, so the recursion stays in integer nanoseconds.
    _, buffer_ns = lindley(pace - interval, counts)
    digest = np.where(buffer_ns > 0, pace, interval).astype(np.float64)
    ids = segment_ids(counts)
    index = np.arange(len(token_times)) - starts[ids] + 1
    weight = np.where(index >= 2, (2 * index - 1) / 2.0, 0.0)
    s_actual = segment_sum(weight * digest, counts)

    enough = counts >= 2
    last = np.where(enough, starts + counts - 1, 0)
    n = counts.astype(np.float64)
    t_last = np.where(enough, token_times[last], 0).astype(np.float64)
    ttlt = t_last + np.where(enough, buffer_ns[last], 0)
    on_time = t_last < expected_ttft + n * pace
    s_target = np.where(
        on_time, n * n * pace / 2.0, n * (2 * ttlt - 2 * expected_ttft - n * pace) / 2.0
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        qoe = np.minimum(1.0, s_actual / s_target)
    out[enough] = qoe[enough]
    return out


def fluidity(token_times: IntArray, counts: IntArray, cfg: MetricConfig) -> FloatArray:
    """Etalon fluidity index of every stream, in [0, 1]; NaN for streams with no token.

    Token ``i`` arrives ``s_i`` after the one before it (the first: after the request was
    sent) and has deadline ``D`` (``D_p`` for the first token, ``D_d`` after). It meets it
    when ``s_i <= D + slack_{i-1}``, which carries the slack forward
    (``slack_i = slack_{i-1} + D - s_i``); a miss resets the slack to zero.
    Documented form: met / tokens. Code form (Etalon's implementation): a miss counts
    ``1 + floor((s_i - slack_{i-1} - D) / D_d)`` times, and fluidity = met / (met + misses).
    """
    out = np.full(len(counts), np.nan)
    if len(token_times) == 0:
        return out
    starts = segment_starts(counts)
    nonempty = counts > 0
    interval = np.diff(token_times, prepend=0)
    interval[starts[nonempty]] = token_times[starts[nonempty]]
    deadline = np.full(len(token_times), cfg.fluidity_decode_deadline_ns, dtype=np.int64)
    deadline[starts[nonempty]] = cfg.fluidity_prompt_deadline_ns
    slack_before, _ = lindley(deadline - interval, counts)
    missed = slack_before + deadline - interval < 0
    met = segment_sum(~missed, counts)
    if cfg.fluidity_form == "code":
        # Etalon's code: a miss counts its own deadline, then one per decode deadline it
        # overran. For a later token that is floor((s - slack) / D_d); for a late first one
        # 1 + floor((s_1 - D_p) / D_d), not floor(s_1 / D_p) (docs/metrics.md#fluidity).
        decode = cfg.fluidity_decode_deadline_ns
        weight = 1 + (interval - slack_before - deadline) // decode
        misses = segment_sum(np.where(missed, weight, 0), counts)
    else:
        misses = segment_sum(missed, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = met / (met + misses)
    out[nonempty] = value[nonempty]
    return out
