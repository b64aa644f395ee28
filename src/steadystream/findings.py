"""Findings: what the numbers of a run say, in words, where the data shows it.

Pure: takes a stream table and its fleet metrics, returns findings. The CLI prints them and
the report points each at its chart. Each rule is documented in docs/report.md#findings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from steadystream._types import TokenSource, Where
from steadystream._units import format_duration, format_share
from steadystream.metrics import ARRIVAL_WINDOW_NS, FleetMetrics, MetricConfig, StreamTable

if TYPE_CHECKING:
    from steadystream.attribution import Explanation

__all__ = ["PER_GAP_FIGURES", "Finding", "find", "is_rechunked"]

HEAD_BURST_FLAG = 2.0  # twice the steady rate in the first window
SINGLE_TOKEN_SHARE = 0.5
ENVELOPE_FLAG = 10.0  # wire bytes per content byte
# Proxy buffering: text events per arrival at which a stream reads as held back and released
# in lumps (a steady engine gives 1; network coalescing about 2), among streams long enough
# to tell, in at least this share of them.
BUFFERING_FLAG = 4.0
BUFFERING_MIN_CHUNKS = 8
BUFFERING_SHARE = 0.5
RECHUNKED_SHARE = 0.5  # streams whose tokens came in pieces: the run went through a re-chunker
# Vantage points from the engine outwards: bursts already seen nearer the engine are not
# the doing of a proxy between the two.
_EDGE_RANK = {
    Where.LAB.value: 0,
    Where.GATEWAY_UPSTREAM.value: 1,
    Where.GATEWAY_DOWNSTREAM.value: 2,
    Where.CLIENT.value: 3,
}


@dataclass(frozen=True, slots=True)
class Finding:
    code: str  # stable identifier, e.g. "p99-hides-freezes"
    message: str
    streams: int  # how many streams it concerns
    figure: str = ""  # the figure it rests on (a metric of docs/metrics.md, or the attribution)


def find(
    table: StreamTable,
    fleet: FleetMetrics,
    config: MetricConfig,
    explanation: Explanation | None = None,
    *,
    edges: StreamTable | None = None,
) -> list[Finding]:
    """Findings for a run, most important first; with an ``explanation`` (attribution of
    its stalls), the cause of most stall time and what to do about it comes first.
    ``edges`` is the run with every vantage point of its streams, where ``table`` holds one
    per stream (a proxy's buffering shows against the stream's edge nearer the engine)."""
    found: list[Finding] = []
    if len(table) == 0:
        return found
    if explanation is not None:
        cause = _dominant_cause(explanation)
        if cause is not None:
            found.append(cause)
    col = table.column
    sources = Counter(table.token_sources)
    # A run whose tokens something cut into pieces on the way (a re-chunking pacer): its
    # chunks and its gaps between pieces are that pacer's, so findings that read them as
    # the server's (one token per chunk, p99/p50 of the gaps) do not apply to it.
    rechunked = is_rechunked(table)
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
                "max_gap_s and gap_p99_s per stream",
            )
        )
    if fleet.unstable_share and not rechunked:
        unstable = int(np.nansum(col("unstable")))
        found.append(
            Finding(
                "unstable-streams",
                f"{format_share(fleet.unstable_share)} of streams are unstable (p99/p50 gap"
                f" ratio above {config.jitter_flag:g}).",
                unstable,
                "unstable_share",
            )
        )
    per_chunk = col("tokens_per_chunk")
    defined = per_chunk[~np.isnan(per_chunk)]
    if len(defined) and (defined <= 1.0).mean() >= SINGLE_TOKEN_SHARE and not rechunked:
        overhead = fleet.envelope_overhead_mean
        cost = f"; each content byte costs {overhead:.0f} bytes on the wire" if overhead else ""
        found.append(
            Finding(
                "single-token-chunks",
                f"{format_share(float((defined <= 1.0).mean()), narrow=True)} of streams send one"
                f" token or less per chunk{cost}."
                " A re-chunking pacer coalesces them.",
                int((defined <= 1.0).sum()),
                "tokens_per_chunk",
            )
        )
    elif fleet.envelope_overhead_mean and fleet.envelope_overhead_mean > ENVELOPE_FLAG:
        found.append(
            Finding(
                "envelope-overhead",
                f"each content byte costs {fleet.envelope_overhead_mean:.0f} bytes on the wire.",
                len(table),
                "envelope_overhead",
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
                f" {format_duration(config.head_window_ns)} after the first visible token, then"
                " slow down.",
                bursty,
                "head_burst",
            )
        )
    buffering = _proxy_buffering(table if edges is None else edges)
    if buffering is not None:
        found.insert(0, buffering)
    estimated = sources[TokenSource.ESTIMATED.value]
    if estimated:
        found.append(
            Finding(
                "tokens-estimated",
                f"token counts of {estimated} streams are estimated from text: their server"
                " reported no completion token count and they did not stop at max_tokens.",
                estimated,
                "token_source",
            )
        )
    shared = sources[TokenSource.USAGE_SHARED.value]
    if shared:
        found.append(
            Finding(
                "tokens-in-pieces",
                f"{shared} streams have more text events than their usage total has tokens:"
                " something between the model and the client (a pacer, a proxy) cut tokens"
                " into pieces. The total is kept; each event holds the tokens that begin in it,"
                " so tokens per chunk is below 1"
                + (
                    ", and the gaps between pieces are the pacer's: the share of unstable"
                    " streams (p99/p50) and one token per chunk are not read as the server's."
                    if rechunked
                    else "."
                ),
                shared,
                "token_source",
            )
        )
    return found


def is_rechunked(table: StreamTable) -> bool:
    """Whether most of the run's streams had their tokens cut into pieces on the way (a
    re-chunking pacer): its chunks and the gaps between them are then that pacer's."""
    shared = sum(1 for source in table.token_sources if source == TokenSource.USAGE_SHARED.value)
    return len(table) > 0 and shared >= RECHUNKED_SHARE * len(table)


PER_GAP_FIGURES = frozenset(("unstable_share",))
"""Fleet figures read from the gaps between chunks as the server's: not compared between a
re-chunked run and one that was not (:func:`is_rechunked`)."""


def _proxy_buffering(table: StreamTable) -> Finding | None:
    """Streams that arrive in lumps after gaps their upstream did not have.

    A buffering proxy (nginx with ``proxy_buffering on`` in front of a close-delimited
    stream) holds events until its buffer fills and then writes them at once: the reader
    gets several text events within a millisecond, then nothing for the time it took to
    fill the buffer again. A stream recorded nearer the engine too (the lab's ground truth,
    the gateway's upstream edge) tells whether the lumps were already there.
    """
    col = table.column
    per_arrival = col("chunks_per_arrival")
    rank = np.array([_EDGE_RANK.get(w, len(_EDGE_RANK)) for w in table.wheres], dtype=np.int64)
    long_enough = col("chunks") >= BUFFERING_MIN_CHUNKS
    with np.errstate(invalid="ignore"):
        lumpy = long_enough & (per_arrival >= BUFFERING_FLAG)
    _, group = np.unique(np.array(table.stream_ids, dtype=object), return_inverse=True)
    groups = int(group.max()) + 1
    # The vantage point nearest the engine at which each stream already came in lumps.
    first_lumpy = np.full(groups, np.iinfo(np.int64).max)
    np.minimum.at(first_lumpy, group[lumpy], rank[lumpy])
    # The engine's own writes are what they are: a proxy sits after it.
    eligible = long_enough & (rank > 0)
    buffered = eligible & lumpy & (rank == first_lumpy[group])
    streams = len(np.unique(group[eligible]))
    affected = len(np.unique(group[buffered]))
    if not affected or affected < BUFFERING_SHARE * streams:
        return None
    burst = float(np.median(per_arrival[buffered]))
    worst = float(np.median(col("max_gap_s")[buffered]))
    message = (
        f"{affected} of {streams} streams arrive in bursts: a median of {burst:.0f} text events"
        f" within {format_duration(ARRIVAL_WINDOW_NS)} of each other, after gaps of up to"
        f" {format_duration(round(worst * 1e9))} (median worst gap)"
    )
    delay = _first_byte_delay(table, group, rank, buffered)
    if delay is not None:
        seconds, pairs = delay
        message += (
            f"; their first byte came {format_duration(round(seconds * 1e9))} after the"
            f" upstream's first token (median of {pairs} streams recorded at both ends)"
        )
    message += (
        ". A buffering proxy holds the stream back: turn its buffering off for event streams"
        " (nginx: proxy_buffering off, or X-Accel-Buffering: no from the upstream, which the"
        " gateway sends)."
    )
    return Finding("proxy-buffering", message, affected, "chunks_per_arrival")


def _first_byte_delay(
    table: StreamTable,
    group: npt.NDArray[np.intp],
    rank: npt.NDArray[np.int64],
    buffered: npt.NDArray[np.bool_],
) -> tuple[float, int] | None:
    """Median TTFB of buffered streams minus the first text event (reasoning or answer) of
    their edge nearest the engine: when a buffer first had something to let through.

    Each edge counts from its own request instant (sent or received), a transit apart, which
    is small next to what a buffer holds back.
    """
    order = np.lexsort((rank, group))
    first_of_group = np.ones(len(order), dtype=bool)
    first_of_group[1:] = group[order][1:] != group[order][:-1]
    inner = np.empty(int(group.max()) + 1, dtype=np.intp)
    inner[group[order][first_of_group]] = order[first_of_group]
    nearest = inner[group]
    paired = buffered & (rank[nearest] < rank)
    first_text = np.fmin(table.column("ttft_s"), table.column("ttfr_s"))
    delays = table.column("ttfb_s")[paired] - first_text[nearest[paired]]
    delays = delays[~np.isnan(delays)]
    if not len(delays):
        return None
    return float(np.median(delays)), len(delays)


def _dominant_cause(explanation: Explanation) -> Finding | None:
    """The cause of most stall time, and its mitigation (docs/attribution.md)."""
    top = explanation.dominant
    if top is None:
        return None
    streams = len({s.stream_id for s in explanation.stalls if s.cause == top.cause})
    total = round(explanation.stall_time_s * 1e9)
    return Finding(
        "stall-cause",
        f"{top.share:.0%} of stall time ({format_duration(round(top.time_s * 1e9))} of"
        f" {format_duration(total)}, {top.stalls} stalls) is {top.cause}: {top.mitigation}.",
        streams,
        "stall time by cause (explain)",
    )
