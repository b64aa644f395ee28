"""What the browser added: a page's client edge against its glass edge, stream by stream.

A glass probe's report gives two timelines with one id: when the page's reader yielded each
token (``where = client``) and the animation frame that painted it (``where = glass``). From
them, per token, the arrival-to-paint delay (paint of token k minus arrival of token k, the
page's renderer and the browser's frame scheduling together), and per frame, how many tokens
it showed: a frame with several tokens is a burst the reader would never see. Both edges are
scored with the same fleet metrics (p99-of-p99, worst gap, TTFT, Andes QoE, Etalon fluidity),
so the rendered stream is judged as the person saw it. Pure: timelines in, numbers out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from steadystream._types import Int64Array, Where
from steadystream.metrics import FleetMetrics, MetricConfig, fleet_metrics
from steadystream.timeline import Timeline

__all__ = ["EdgeComparison", "compare_edges", "glass_pairs", "paint_delays_ns", "rendered_view"]


@dataclass(frozen=True, slots=True)
class EdgeComparison:
    """The client and glass edges of the same streams, and what lies between them."""

    streams: int
    client: FleetMetrics
    glass: FleetMetrics
    frames: int
    multi_token_frames: int  # frames that showed more than one token
    multi_token_frame_share: float | None
    tokens_in_multi_token_frames_share: float | None
    paint_delay_p50_s: float | None  # arrival to paint, every token of every stream pooled
    paint_delay_p99_s: float | None
    paint_delay_max_s: float | None
    labels: dict[str, str]  # labels all the glass streams share (e.g. renderer)


def glass_pairs(timelines: Sequence[Timeline]) -> list[tuple[Timeline, Timeline]]:
    """(client, glass) per stream id that has both; the page's own client edge preferred."""
    glass = {t.stream_id: t for t in timelines if t.where is Where.GLASS}
    clients: dict[str, Timeline] = {}
    for t in timelines:
        if t.where is Where.CLIENT and t.stream_id in glass:
            seen = clients.get(t.stream_id)
            if seen is None or t.labels.get("vantage") == "browser":
                clients[t.stream_id] = t
    return [(clients[i], glass[i]) for i in glass if i in clients]


def _token_times(timeline: Timeline) -> Int64Array:
    """The time of each token (an event's tokens all arrive with it)."""
    mask = timeline.text_mask
    return np.repeat(timeline.times[mask], timeline.tokens[mask])


def paint_delays_ns(client: Timeline, glass: Timeline) -> Int64Array:
    """Paint minus arrival for each token both edges saw (tokens never painted are left out)."""
    arrived = _token_times(client)
    painted = _token_times(glass)
    n = min(len(arrived), len(painted))
    return painted[:n] - arrived[:n]


def compare_edges(
    timelines: Sequence[Timeline], config: MetricConfig | None = None
) -> EdgeComparison | None:
    """The comparison over every stream with both edges; None when there is none."""
    pairs = glass_pairs(timelines)
    if not pairs:
        return None
    delays = np.concatenate([paint_delays_ns(c, g) for c, g in pairs]).astype(np.float64) / 1e9
    frame_tokens = np.concatenate([g.tokens[g.text_mask] for _, g in pairs])
    multi = frame_tokens > 1
    frames = len(frame_tokens)
    total = int(frame_tokens.sum())
    shared = dict(pairs[0][1].labels)
    for _, g in pairs[1:]:
        shared = {k: v for k, v in shared.items() if g.labels.get(k) == v}
    shared.pop("vantage", None)
    return EdgeComparison(
        streams=len(pairs),
        client=fleet_metrics([c for c, _ in pairs], config),
        glass=fleet_metrics([g for _, g in pairs], config),
        frames=frames,
        multi_token_frames=int(multi.sum()),
        multi_token_frame_share=float(multi.mean()) if frames else None,
        tokens_in_multi_token_frames_share=(
            float(frame_tokens[multi].sum() / total) if total else None
        ),
        paint_delay_p50_s=float(np.percentile(delays, 50)) if len(delays) else None,
        paint_delay_p99_s=float(np.percentile(delays, 99)) if len(delays) else None,
        paint_delay_max_s=float(delays.max()) if len(delays) else None,
        labels=shared,
    )


def rendered_view(timelines: Sequence[Timeline]) -> tuple[list[Timeline], str | None]:
    """The timelines a run's headline numbers describe, and a note when that is not all.

    A run with glass timelines (``steadystream glass``, or a gateway recording with probe
    reports) holds several vantage points of the same streams; pooled, each stream would
    count two or three times. Its headline is the glass edge, what people saw; the edges
    table compares it with the page's reader.
    """
    glass = [t for t in timelines if t.where is Where.GLASS]
    if not glass or len(glass) == len(timelines):
        return list(timelines), None
    others = sorted({t.where.value for t in timelines if t.where is not Where.GLASS})
    return glass, (
        f"this run holds glass timelines: the numbers describe the {len(glass)} glass streams"
        f" (what was painted); its {', '.join(others)} timelines are left out of them, and the"
        " page's reader is compared with the glass in the edges table"
    )
