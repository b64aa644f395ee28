"""The lab's Prometheus metrics, under vLLM's names so that readers work on both.

Names and meanings follow vLLM's OpenAI server (``vllm:num_requests_running`` and friends;
counters gain ``_total`` in the exposition, as vLLM's do; ``kv_cache_usage_perc`` is a
fraction, 1 meaning full, as in vLLM). Every series carries ``model_name`` and ``engine``.
The lab adds its own under ``lab:``: scheduling lag (actual step start minus planned) and
the steps it had to re-anchor because it fell too far behind.

Time to first token and inter-token latency are observed when the lab writes the events,
so they match the ground truth at ``/lab/requests`` exactly. They are observed once per SSE
event, thousands of times a second, so they are kept in :class:`EventHistogram` (a list
increment, no lock: the lab observes and is scraped on its one event-loop thread) and
exposed by a collector. A registry is passed in; the global one is never touched.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "EventHistogram", "LabMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_LAG_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class EventHistogram(Collector):
    """A histogram cheap enough to observe per event; collected like any other."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        labels: dict[str, str],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(float(b) for b in buckets)
        self._labels = labels
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1  # buckets are "<= bound"
        self._sum += value

    @property
    def count(self) -> int:
        return sum(self._counts)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=list(self._labels))
        cumulative = 0
        buckets = []
        for bound, count in zip((*self._bounds, float("inf")), self._counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(cumulative)))
        family.add_metric(list(self._labels.values()), buckets, self._sum)
        yield family


class LabMetrics:
    """Prometheus series for one lab, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry, *, model_name: str = "lab") -> None:
        self.registry = registry
        names = ["model_name", "engine"]
        values = (model_name, "0")

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=registry).labels(*values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=registry).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=registry).labels(*values)

        self.running = gauge("vllm:num_requests_running", "Requests in the model batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage, 1 meaning full.")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions for KV space.")
        self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Speculative drafts.")
        self.spec_draft_tokens = counter(
            "vllm:spec_decode_num_draft_tokens", "Speculative draft tokens proposed."
        )
        self.spec_accepted = counter(
            "vllm:spec_decode_num_accepted_tokens", "Speculative draft tokens accepted."
        )
        label_values = dict(zip(names, values, strict=True))
        self.ttft = EventHistogram(
            "vllm:time_to_first_token_seconds",
            "Arrival to first content write.",
            _TTFT_BUCKETS,
            label_values,
            registry,
        )
        self.itl = EventHistogram(
            "vllm:inter_token_latency_seconds",
            "Between content writes.",
            _ITL_BUCKETS,
            label_values,
            registry,
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Tokens processed per step.", _ITERATION_BUCKETS
        )
        self.lag = histogram(
            "lab:scheduling_lag_seconds", "Actual step start minus planned.", _LAG_BUCKETS
        )
        self.lag_resets = counter(
            "lab:scheduling_lag_resets", "Steps re-anchored after falling far behind."
        )

    def observe_step(
        self, running: int, waiting: int, kv_usage: float, iteration_tokens: int
    ) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)
        if iteration_tokens:
            self.iteration_tokens.observe(iteration_tokens)

    def observe_spec(self, drafts: int, draft_tokens: int, accepted: int) -> None:
        if drafts:
            self.spec_drafts.inc(drafts)
            self.spec_draft_tokens.inc(draft_tokens)
            self.spec_accepted.inc(accepted)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
