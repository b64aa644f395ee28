"""Prometheus metrics of the gateway (prefix ``steadystream_``, seconds), in a registry passed in.

Per-stream numbers are observed once, when a stream ends, from the same timelines that are
recorded (:func:`steadystream.metrics.stream_table`), so ``/metrics`` and the recordings
agree by construction: every gap goes into ``steadystream_gap_seconds``, and each stream's
p99 gap and worst gap go into their own histograms, so a fleet's p99-of-p99 is a PromQL
``histogram_quantile`` over ``steadystream_stream_p99_gap_seconds``.

Histograms that take a whole stream's gaps at once are the project's one hand-rolled
histogram (:mod:`steadystream._histogram`, shared with the lab): one ``searchsorted`` per
stream instead of one locked ``observe`` per gap.
docs/gateway.md#metrics maps each metric to its OpenTelemetry GenAI counterpart.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from steadystream._histogram import FastHistogram, Histograms
from steadystream.gateway.shared_metrics import SharedMetrics
from steadystream.metrics import stream_table
from steadystream.timeline import Timeline

__all__ = [
    "ADDED_BUCKETS",
    "CONTENT_TYPE",
    "GAP_BUCKETS",
    "GatewayMetrics",
    "StreamLabels",
    "added_latency_s",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

GAP_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.033, 0.035, 0.04, 0.045,
    0.05, 0.055, 0.06, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.75, 1.0, 1.5,
    2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Gap bucket bounds (s): fine enough to tell a 33 ms cadence from 50 ms, and 400 ms stalls."""
TTFT_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0,
    3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
CANCEL_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
ADDED_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5,
)  # fmt: skip
"""Added-latency bounds (s): a relay's tens of microseconds up to a pacer's holding."""
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
BYTES_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)

StreamLabels = tuple[str, str, str, str]
"""(model, route, tenant, upstream)"""

_STREAM = ("model", "route", "tenant", "upstream")
_EDGE = (*_STREAM, "edge")
_EDGES = ("upstream", "downstream")
_BATCH = 32  # finished streams observed together (GatewayMetrics.flush)


class GatewayMetrics:
    """Every gateway series, registered in ``registry`` (never the global one).

    ``/metrics`` renders these series (:meth:`view`), not whatever else is registered in
    ``registry``: a copy of them is what another thread can render while the loop serves.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.shared: SharedMetrics | None = None  # set in each worker of several
        h = FastHistogram
        self.gap = h(
            "steadystream_gap_seconds", "Every inter-token gap of every stream.", _EDGE, GAP_BUCKETS
        )
        self.stream_p99_gap = h(
            "steadystream_stream_p99_gap_seconds",
            "Each stream's p99 inter-token gap, observed once at its end.",
            _EDGE,
            GAP_BUCKETS,
        )
        self.stream_max_gap = h(
            "steadystream_stream_max_gap_seconds",
            "Each stream's worst inter-token gap, observed once at its end.",
            _EDGE,
            GAP_BUCKETS,
        )
        self.ttft = h(
            "steadystream_ttft_seconds",
            "Time to the first visible token (content or tool call), from request receipt.",
            _EDGE,
            TTFT_BUCKETS,
        )
        self.ttfr = h(
            "steadystream_ttfr_seconds",
            "Time to the first reasoning token, from request receipt; streams that reasoned.",
            _EDGE,
            TTFT_BUCKETS,
        )
        self.ttfb = h(
            "steadystream_ttfb_seconds", "Time to the first body byte, from request receipt.",
            _EDGE, TTFT_BUCKETS,
        )  # fmt: skip
        self.duration = h(
            "steadystream_request_duration_seconds",
            "Request receipt to the end of the response.",
            _STREAM,
            DURATION_BUCKETS,
        )
        self.output_tokens = h(
            "steadystream_output_tokens", "Output tokens per stream.", _STREAM, TOKEN_BUCKETS
        )
        self.cancel_latency = h(
            "steadystream_cancel_latency_seconds",
            "Client disconnect noticed to upstream response closed.",
            ("route",),
            CANCEL_BUCKETS,
        )
        self.added_latency = h(
            "steadystream_added_latency_seconds",
            "Per event: handed to the client minus arrived from the upstream (the kernel's "
            "receive stamp where the platform gives it): the gateway's own latency.",
            _STREAM,
            ADDED_BUCKETS,
        )
        self.buffer_peak = h(
            "steadystream_stream_buffer_peak_bytes",
            "Most bytes one stream held between upstream and client.",
            ("route",),
            BYTES_BUCKETS,
        )
        self._ended: list[tuple[StreamLabels, tuple[Timeline, ...], float]] = []
        self._rendering: asyncio.Future[bytes] | None = None
        self._renders = 0  # texts started (render)
        self._rendering_since = 0  # the number of the one being made
        self._histograms = Histograms(
            [
                self.gap,
                self.stream_p99_gap,
                self.stream_max_gap,
                self.ttft,
                self.ttfr,
                self.ttfb,
                self.duration,
                self.output_tokens,
                self.cancel_latency,
                self.added_latency,
                self.buffer_peak,
            ],
            before_collect=self.flush,
        )
        registry.register(self._histograms)
        self.streams = Counter(
            "steadystream_streams", "Requests by how they ended.", [*_STREAM, "outcome"],
            registry=registry,
        )  # fmt: skip
        self.stalls = Counter(
            "steadystream_stalls", "Watchdog timeouts.", [*_STREAM, "kind"], registry=registry
        )
        self.failovers = Counter(
            "steadystream_failovers",
            "Failovers by kind (retry, continue, regenerate, off) and result.",
            [*_STREAM, "kind", "result"],
            registry=registry,
        )
        self.cancellations = Counter(
            "steadystream_cancellations", "Client disconnects mid-request.", _STREAM,
            registry=registry,
        )  # fmt: skip
        self.client_stuck = Counter(
            "steadystream_client_stuck_cuts", "Clients cut for not reading.", _STREAM,
            registry=registry,
        )  # fmt: skip
        self.errors = Counter(
            "steadystream_errors", "Errors returned or sent in-band, by kind.",
            ["route", "tenant", "kind"], registry=registry,
        )  # fmt: skip
        self.active = Gauge(
            "steadystream_active_streams", "Requests in flight.", ["route"], registry=registry
        )
        self.passthrough = Counter(
            "steadystream_passthrough_requests",
            "Requests passed through whole (embeddings, moderations, token counts), by the"
            " status the client got; not streams.",
            [*_STREAM, "status"],
            registry=registry,
        )
        self.passthrough_failovers = Counter(
            "steadystream_passthrough_failovers",
            "Passed-through requests sent on to the next upstream, by the upstream that failed.",
            ["route", "upstream"],
            registry=registry,
        )
        # Resume (docs/gateway.md#resume): how readers came back, what they were sent again,
        # generations cancelled because no reader came back, and what was made meanwhile.
        self.resumes = Counter(
            "steadystream_resumes",
            "Readers that came back to a stream, by route and how (stream, idempotency, "
            "responses).",
            ["route", "how"],
            registry=registry,
        )
        self.resume_events_replayed = Counter(
            "steadystream_resume_events_replayed",
            "Events sent again to readers that came back.",
            ["route"],
            registry=registry,
        )
        self.resume_grace_expiries = Counter(
            "steadystream_resume_grace_expiries",
            "Generations cancelled because no reader came back within resume.grace.",
            ["route"],
            registry=registry,
        )
        self.tokens_without_reader = Counter(
            "steadystream_tokens_without_reader",
            "Tokens generated while no client read the stream (the cancellation tax).",
            ["route"],
            registry=registry,
        )
        self.resume_store_up = Gauge(
            "steadystream_resume_store_up",
            "1 while the resume store takes writes (always, with the memory store); 0 while"
            " streams go on unresumable (the shared store is unreachable).",
            registry=registry,
        )
        self.resume_store_errors = Counter(
            "steadystream_resume_store_errors",
            "Failed batches of writes to the shared resume store.",
            registry=registry,
        )
        self._locked = [
            self.streams,
            self.stalls,
            self.failovers,
            self.cancellations,
            self.client_stuck,
            self.errors,
            self.active,
            self.passthrough,
            self.passthrough_failovers,
            self.resumes,
            self.resume_events_replayed,
            self.resume_grace_expiries,
            self.tokens_without_reader,
            self.resume_store_up,
            self.resume_store_errors,
        ]

    def view(self) -> CollectorRegistry:
        """Every series as of now, in a registry another thread may collect.

        The histograms are copied (a list copy per series), the counters and the gauge
        collected here (a few series each): a snapshot holds one instant, so no thread that
        collects it late can write counters older than the histograms beside them, or older
        than a snapshot written before it.
        """
        view = CollectorRegistry(auto_describe=False)
        view.register(self._histograms.frozen())
        view.register(_Collected([family for m in self._locked for family in m.collect()]))
        return view

    def exposition(self) -> bytes:
        """This process's metrics; with several workers (:attr:`shared`), all of theirs summed."""
        if self.shared is not None:
            return self.shared.exposition()
        return generate_latest(self.view())

    async def render(self) -> bytes:
        """:meth:`exposition` for a scrape: the view taken here, the text made on a thread.

        With many series (every model label times every bucket) the text takes long enough
        to be a stall of every stream on this loop (hundreds of milliseconds at a hundred
        models). One text is made at a time; a scrape shares one whose view was taken after
        it came (so it never misses a stream that ended before it asked), and otherwise
        waits for the one being made and shares the next.
        """
        came = self._renders
        while True:
            rendering = self._rendering
            if rendering is None or rendering.done():
                rendering = self._start_rendering()
            elif self._rendering_since <= came:  # its view is older than this scrape
                await asyncio.wait([rendering])
                continue
            return await asyncio.shield(rendering)

    def _start_rendering(self) -> asyncio.Future[bytes]:
        if self.shared is not None:
            work = functools.partial(self.shared.exposition, self.shared.snapshot())
        else:
            work = functools.partial(generate_latest, self.view())
        self._renders += 1
        self._rendering_since = self._renders
        rendering = self._rendering = asyncio.ensure_future(asyncio.to_thread(work))
        # If every scrape waiting for it went away before it ended, nobody would read its
        # error, and asyncio would log it as never retrieved.
        rendering.add_done_callback(_retrieved)
        return rendering

    def observe_stream(
        self,
        labels: StreamLabels,
        timelines: Sequence[Timeline],
        *,
        duration_s: float,
    ) -> None:
        """One finished stream: ``timelines`` are its (upstream, downstream) edges.

        Streams are observed in batches (:meth:`flush`): one stream table for a batch's
        edges costs about what one stream's costs, and a burst of stream ends would
        otherwise delay every other stream's next write by one table each. Whatever reads
        the metrics (a scrape, a worker's snapshot) flushes first, so nothing reads stale.
        """
        self._ended.append((labels, tuple(timelines), duration_s))
        if len(self._ended) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Observe the streams that ended since the last flush."""
        ended, self._ended = self._ended, []
        if not ended:
            return
        table = stream_table([timeline for _, edges, _ in ended for timeline in edges])
        starts = np.concatenate([[0], np.cumsum(table.gap_counts)])
        columns = table.columns
        per_stream = (
            (self.stream_p99_gap, columns["gap_p99_s"]),
            (self.stream_max_gap, columns["max_gap_s"]),
            (self.ttft, columns["ttft_s"]),
            (self.ttfr, columns["ttfr_s"]),  # NaN, not observed, where a stream did not reason
            (self.ttfb, columns["ttfb_s"]),
        )
        # Values gathered by histogram and label set, then observed once per series.
        gathered: dict[tuple[FastHistogram, tuple[str, ...]], list[npt.ArrayLike]] = {}

        def gather(histogram: FastHistogram, key: tuple[str, ...], values: npt.ArrayLike) -> None:
            gathered.setdefault((histogram, key), []).append(values)

        row = 0
        for labels, edges, duration_s in ended:
            for edge in _EDGES[: len(edges)]:
                key = (*labels, edge)
                gather(self.gap, key, table.gap_values_s[starts[row] : starts[row + 1]])
                for histogram, column in per_stream:
                    gather(histogram, key, column[row : row + 1])
                row += 1
            gather(self.duration, labels, [duration_s])
            if len(edges) == 2:
                gather(self.added_latency, labels, added_latency_s(*edges))
            gather(self.output_tokens, labels, columns["output_tokens"][row - 1 : row])
        for (histogram, series), parts in gathered.items():
            histogram.observe(
                series, np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])
            )


class _Collected(Collector):
    """Families collected already, collected again as they were."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _retrieved(future: asyncio.Future[bytes]) -> None:
    if not future.cancelled():
        future.exception()


def added_latency_s(upstream: Timeline, downstream: Timeline) -> npt.NDArray[np.float64]:
    """Per event, downstream hand-off minus upstream arrival (s); empty where events differ.

    Both edges count from the request's receipt on one clock. Events pair one to one when
    the gateway relays them as they came; a pacer that merges or splits events (or a
    failover's rewrite) leaves no pairing, and nothing is observed for that stream.
    """
    if len(upstream) != len(downstream) or len(upstream) == 0:
        return np.empty(0)
    return np.asarray(downstream.times - upstream.times, dtype=np.float64) / 1e9
