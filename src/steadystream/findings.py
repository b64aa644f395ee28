"""Findings: what the numbers of a run say, in words, where the data shows it.

Pure: takes a stream table and its fleet metrics, returns findings. The CLI prints them and
the report points each at its chart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from steadystream._units import format_duration
from steadystream.metrics import FleetMetrics, MetricConfig, StreamTable

__all__ = ["Finding", "find"]

HEAD_BURST_FLAG = 2.0  # twice the steady rate in the first window
SINGLE_TOKEN_SHARE = 0.5
ENVELOPE_FLAG = 10.0  # wire bytes per content byte


@dataclass(frozen=True, slots=True)
class Finding:
    code: str  # stable identifier, e.g. "p99-hides-freezes"
    message: str
    streams: int  # how many streams it concerns


def find(table: StreamTable, fleet: FleetMetrics, config: MetricConfig) -> list[Finding]:
    """Findings for a run, most important first."""
    found: list[Finding] = []
    if len(table) == 0:
        return found
    col = table.column
    threshold = config.stall_threshold_ns / 1e9
    worst, p99 = col("max_gap_s"), col("gap_p99_s")
    with np.errstate(invalid="ignore"):
        hidden = int(((worst > threshold) & (p99 <= threshold)).sum())
        stalled = int((worst > threshold).sum())
    if hidden:
        found.append(
            Finding(
                "p99-hides-freezes",
                f"{hidden} of {stalled} streams with a stall over"
                f" {format_duration(config.stall_threshold_ns)}"
                " kept their own p99 gap under it: one freeze is a single gap, above the 99th"
                " percentile. The worst gap is the number that shows it.",
                hidden,
            )
        )
    if fleet.unstable_share:
        unstable = int(np.nansum(col("unstable")))
        found.append(
            Finding(
                "unstable-streams",
                f"{fleet.unstable_share:.1%} of streams are unstable (p99/p50 gap ratio above"
                f" {config.jitter_flag:g}).",
                unstable,
            )
        )
    per_chunk = col("tokens_per_chunk")
    defined = per_chunk[~np.isnan(per_chunk)]
    if len(defined) and (defined <= 1.0).mean() >= SINGLE_TOKEN_SHARE:
        overhead = fleet.envelope_overhead_mean
        cost = f"; each content byte costs {overhead:.0f} bytes on the wire" if overhead else ""
        found.append(
            Finding(
                "single-token-chunks",
                f"{(defined <= 1.0).mean():.0%} of streams send one token per chunk{cost}."
                " A re-chunking pacer coalesces them.",
                int((defined <= 1.0).sum()),
            )
        )
    elif fleet.envelope_overhead_mean and fleet.envelope_overhead_mean > ENVELOPE_FLAG:
        found.append(
            Finding(
                "envelope-overhead",
                f"each content byte costs {fleet.envelope_overhead_mean:.0f} bytes on the wire.",
                len(table),
            )
        )
    burst = col("head_burst")
    with np.errstate(invalid="ignore"):
        bursty = int((burst > HEAD_BURST_FLAG).sum())
    if bursty and bursty >= 0.1 * np.count_nonzero(~np.isnan(burst)):
        found.append(
            Finding(
                "head-burst",
                f"{bursty} streams deliver over {HEAD_BURST_FLAG:g}x their steady rate in the first"
                f" {format_duration(config.head_window_ns)} after the first token, then slow down.",
                bursty,
            )
        )
    estimated = sum(1 for s in table.token_sources if s == "estimated")
    if estimated:
        found.append(
            Finding(
                "tokens-estimated",
                f"token counts of {estimated} streams are estimated from text (no usage reported).",
                estimated,
            )
        )
    return found
