"""The lab's Prometheus metrics, under vLLM's names so that readers work on both.

Names and meanings follow vLLM's OpenAI server (``vllm:num_requests_running`` and friends;
counters gain ``_total`` in the exposition, as vLLM's do; ``kv_cache_usage_perc`` is a
fraction, 1 meaning full, as in vLLM). Every series carries ``model_name`` and ``engine``.
The lab adds its own under ``lab:``: scheduling lag (actual step start minus planned), the
steps it had to re-anchor because it fell too far behind, and the injected pauses played
(``lab:injected_faults_total``, as the replay counts its own: a stall or slow first token
that a fault asked for, ``X-Lab-Fault`` or the scenario's, counted when the content event it
held back is written), so that ``explain`` names them ``injected-fault`` from the scraped
metrics. A silent finish is not counted: it holds no text back, so it makes no stall, and a
count during another stream's stall would only mislead.

Time to first token and inter-token latency are observed when the lab writes the events,
so they match the ground truth at ``/lab/requests`` exactly. They are observed once per SSE
event, thousands of times a second, so they are kept in the project's hand-rolled
histogram (:mod:`steadystream._histogram`: a list increment, no lock, since the lab observes
and is scraped on its one event-loop thread). A registry is passed in; the global one is
never touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from steadystream._causes import Cause
from steadystream._histogram import FastHistogram, Histograms, HistogramSeries

__all__ = ["CONTENT_TYPE", "LabMetrics", "event_histogram"]

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


def event_histogram(
    name: str,
    documentation: str,
    buckets: Sequence[float],
    labels: dict[str, str],
    registry: CollectorRegistry,
) -> HistogramSeries:
    """A histogram cheap enough to observe per event, registered with one label set."""
    histogram = FastHistogram(name, documentation, list(labels), buckets)
    registry.register(Histograms([histogram]))
    return histogram.labels(*labels.values())


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
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens prefilled.")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions for KV space.")
        self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Speculative drafts.")
        self.spec_draft_tokens = counter(
            "vllm:spec_decode_num_draft_tokens", "Speculative draft tokens proposed."
        )
        self.spec_accepted = counter(
            "vllm:spec_decode_num_accepted_tokens", "Speculative draft tokens accepted."
        )
        label_values = dict(zip(names, values, strict=True))
        self.ttft = event_histogram(
            "vllm:time_to_first_token_seconds",
            "Arrival to first content write.",
            _TTFT_BUCKETS,
            label_values,
            registry,
        )
        self.itl = event_histogram(
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
        # the replay's name too (attribution.engine.INJECTED_FAULTS): one reader for both
        self.injected_faults = counter(
            "lab:injected_faults", "Injected pauses played (the event each held back was written)."
        )

    def observe_step(
        self,
        running: int,
        waiting: int,
        kv_usage: float,
        iteration_tokens: int,
        prompt_tokens: int = 0,
    ) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)
        if iteration_tokens:
            self.iteration_tokens.observe(iteration_tokens)
        if prompt_tokens:
            # Recomputed prompts count too, as vLLM's counter counts every prefilled token.
            self.prompt_tokens.inc(prompt_tokens)

    def observe_spec(self, drafts: int, draft_tokens: int, accepted: int) -> None:
        if drafts:
            self.spec_drafts.inc(drafts)
            self.spec_draft_tokens.inc(draft_tokens)
            self.spec_accepted.inc(accepted)

    def observe_injected(self, extras: Iterable[Mapping[Cause, int] | None]) -> None:
        """Count the injected pauses played: each event written whose gap carries one."""
        played = sum(1 for extra in extras if extra and extra.get(Cause.INJECTED_FAULT, 0) > 0)
        if played:
            self.injected_faults.inc(played)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
