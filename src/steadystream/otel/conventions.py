"""Every name and bucket bound this package exports, declared once (docs/monitoring.md lists
them; tests check the two agree).

The ``gen_ai.*`` names and the bounds are the OpenTelemetry GenAI semantic conventions'
(semantic-conventions-genai, status Development: "gen-ai-metrics.md" and
"gen-ai-spans.md", as of v1.41.0 of the semantic conventions, where
``time_to_first_chunk`` and ``time_per_output_chunk`` were added). Ours sit beside them
under ``steadystream.*``, in seconds like theirs.
"""

from __future__ import annotations

__all__ = [
    "CHUNK_BUCKETS",
    "DURATION_BUCKETS",
    "GAP_BUCKETS",
    "METRICS",
    "SERVER_TPOT_BUCKETS",
    "SERVER_TTFT_BUCKETS",
    "TOKEN_BUCKETS",
    "MetricSpec",
]

from dataclasses import dataclass

# -- the conventions' recommended explicit bucket boundaries ------------------------------------

DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
"""gen_ai.client.operation.duration (and gen_ai.server.request.duration)."""
CHUNK_BUCKETS = DURATION_BUCKETS
"""gen_ai.client.operation.time_to_first_chunk and time_per_output_chunk: the same bounds."""
TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
"""gen_ai.client.token.usage."""
SERVER_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""gen_ai.server.time_to_first_token."""
SERVER_TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
"""gen_ai.server.time_per_output_token."""

# -- ours ---------------------------------------------------------------------------------------

GAP_BUCKETS = (
    0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5,
    2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""A stream's worst and p99 gap: fine around a 20 to 50 ms cadence and at the 400 ms stall
threshold, where the conventions' doubling bounds (0.32, 0.64) cannot tell a stall from none."""


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One instrument: its name, kind, unit, description and bounds."""

    name: str
    kind: str  # histogram | counter
    unit: str
    description: str
    buckets: tuple[float, ...] = ()


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(
            "gen_ai.client.operation.duration", "histogram", "s",
            "GenAI operation duration.", DURATION_BUCKETS,
        ),
        MetricSpec(
            "gen_ai.client.operation.time_to_first_chunk", "histogram", "s",
            "Time to receive the first chunk, from when the request was issued.", CHUNK_BUCKETS,
        ),
        MetricSpec(
            "gen_ai.client.operation.time_per_output_chunk", "histogram", "s",
            "Time per output chunk, recorded for each chunk received after the first one.",
            CHUNK_BUCKETS,
        ),
        MetricSpec(
            "gen_ai.client.token.usage", "histogram", "{token}",
            "Number of input and output tokens used.", TOKEN_BUCKETS,
        ),
        MetricSpec(
            "gen_ai.server.time_to_first_token", "histogram", "s",
            "Time to generate first token for successful responses.", SERVER_TTFT_BUCKETS,
        ),
        MetricSpec(
            "gen_ai.server.time_per_output_token", "histogram", "s",
            "Time per output token generated after the first token for successful responses.",
            SERVER_TPOT_BUCKETS,
        ),
        MetricSpec(
            "steadystream.stream.worst_gap", "histogram", "s",
            "Each stream's longest gap between two chunks after the first: the freeze a"
            " person watched.", GAP_BUCKETS,
        ),
        MetricSpec(
            "steadystream.stream.p99_gap", "histogram", "s",
            "Each stream's own 99th-percentile gap between chunks.", GAP_BUCKETS,
        ),
        MetricSpec(
            "steadystream.stream.stalls", "counter", "{stall}",
            "Gaps longer than the stall threshold (400 ms unless configured).",
        ),
        MetricSpec(
            "steadystream.streams", "counter", "{stream}",
            "Streams by how they ended (steadystream.outcome).",
        ),
    )
}  # fmt: skip
