"""A finished stream as telemetry: one span (attributes, events) and its metric observations.

Pure: timelines in, values out; the SDK edge (:mod:`steadystream.otel.sdk`) hands them on.

Which edge is which: the gateway is a GenAI client of its upstream and a GenAI server to the
app, so the ``gen_ai.client.*`` numbers (and ``gen_ai.response.time_to_first_chunk``) are
taken at its upstream edge, the ``gen_ai.server.*`` ones at its downstream edge, and ours
(worst gap, p99 gap, stalls) at the downstream edge too: what the person saw. ``bench`` is a
client only: everything from its one timeline, no server metrics.

A chunk is an event that carries text (content, reasoning, a tool call), as everywhere in
steadystream (docs/metrics.md): the first chunk is the first such event, never a role-only
or empty one, and the per-chunk times are the gaps between them.

Nothing secret or private is taken: no text, no error message from an upstream (it may quote
the prompt), no header. Failover causes and upstream names are the gateway's own words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream._types import Outcome
from steadystream.metrics import MetricConfig, stream_table
from steadystream.stamped.target import Target
from steadystream.timeline import Timeline

__all__ = [
    "Call",
    "SpanEvent",
    "StreamMeasures",
    "StreamSpan",
    "client_stream",
    "gateway_stream",
    "server_of",
]

Attributes = dict[str, Any]
_NS = 1e9
_FAILED = frozenset({Outcome.ERROR, Outcome.TRUNCATED, Outcome.CLIENT_STUCK})
_SUCCEEDED = frozenset({Outcome.COMPLETE, Outcome.FAILED_OVER})
MAX_MODEL_CHARS = 256
"""A model name as a client sent it is cut to this many characters in a span (its name and
``gen_ai.*.model``): one huge name must not make a batch the collector refuses whole."""
MAX_STALL_EVENTS = 64
"""Stall events (and causes) per span at most; ``steadystream.stream.stalls`` counts them all."""


@dataclass(frozen=True, slots=True)
class Call:
    """What the telemetry needs to know about a request besides its timelines."""

    operation: str  # gen_ai.operation.name: chat, text_completion
    provider: str  # gen_ai.provider.name: openai, anthropic
    streaming: bool
    request_model: str
    response_model: str | None = None
    metric_model: str | None = None  # the model as a bounded metric label (None: as requested)
    server_address: str | None = None
    server_port: int | None = None


def server_of(url: str) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of a base URL (None, None: not one)."""
    try:
        target = Target.from_url(url)
    except ValueError:
        return None, None
    return target.host, target.port


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    unix_ns: int
    attributes: Attributes


@dataclass(frozen=True, slots=True)
class StreamSpan:
    """One stream's span, made when it ended; times are Unix nanoseconds."""

    name: str
    start_unix_ns: int
    end_unix_ns: int
    attributes: Attributes
    events: tuple[SpanEvent, ...]
    error_type: str | None = None


@dataclass(slots=True)
class StreamMeasures:
    """One stream's metric observations, in seconds and tokens (None: not measured)."""

    attributes: Attributes  # the conventions' metric attributes
    outcome: str
    streaming: bool
    duration_s: float
    time_to_first_chunk_s: float | None = None
    chunk_gaps_s: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    input_tokens: int | None = None
    output_tokens: int | None = None
    server_ttft_s: float | None = None
    server_tpot_s: float | None = None
    worst_gap_s: float | None = None
    p99_gap_s: float | None = None
    stalls: int | None = None
    error_type: str | None = None


def gateway_stream(
    upstream: Timeline, downstream: Timeline, call: Call, *, metrics: MetricConfig | None = None
) -> tuple[StreamSpan, StreamMeasures]:
    """The span and measures of one stream through the gateway (its two edges)."""
    return _stream(upstream, downstream, call, metrics or MetricConfig(), server=True)


def client_stream(
    timeline: Timeline, call: Call, *, metrics: MetricConfig | None = None
) -> tuple[StreamSpan, StreamMeasures]:
    """The span and measures of one stream a client (``bench``) recorded."""
    return _stream(timeline, timeline, call, metrics or MetricConfig(), server=False)


def _stream(
    client_edge: Timeline, felt: Timeline, call: Call, config: MetricConfig, *, server: bool
) -> tuple[StreamSpan, StreamMeasures]:
    table = stream_table([client_edge, felt] if felt is not client_edge else [client_edge], config)
    client, user = table.row(0), table.row(len(table) - 1)
    outcome = felt.outcome
    error_type = outcome.value if outcome in _FAILED else None
    usage = felt.usage or client_edge.usage or {}
    input_tokens = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    output_tokens = _count(usage.get("completion_tokens", usage.get("output_tokens")))

    request_model = _short(call.request_model)
    common: Attributes = {
        "gen_ai.operation.name": call.operation,
        "gen_ai.provider.name": call.provider,
        "gen_ai.request.model": request_model,
    }
    if call.response_model:
        common["gen_ai.response.model"] = _short(call.response_model)
    if call.server_address:
        common["server.address"] = call.server_address
        if call.server_port is not None:
            common["server.port"] = call.server_port

    attributes: Attributes = {
        **common,
        "gen_ai.system": call.provider,  # the name before gen_ai.provider.name, for older readers
        "gen_ai.request.stream": call.streaming,
        "steadystream.request_id": felt.stream_id,
        "steadystream.outcome": outcome.value,
        "steadystream.where": felt.where.value,
    }
    for label in ("route", "tenant", "upstream"):
        if felt.labels.get(label):
            attributes[f"steadystream.{label}"] = felt.labels[label]
    if call.streaming and client.ttft_s is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = client.ttft_s
    if input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = input_tokens
    if output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = output_tokens
    if error_type is not None:
        attributes["error.type"] = error_type
    _put(attributes, "steadystream.stream.ttft", user.ttft_s)
    _put(attributes, "steadystream.stream.worst_gap", user.max_gap_s)
    _put(attributes, "steadystream.stream.p99_gap", user.gap_p99_s)
    _put(attributes, "steadystream.stream.stalls", user.stall_count)
    _put(attributes, "steadystream.stream.stall_time", user.stall_time_s)
    if felt is not client_edge:
        _put(attributes, "steadystream.upstream.worst_gap", client.max_gap_s)

    attempts = felt.meta.get("attempts") or []
    failovers = felt.meta.get("failovers") or []
    if attempts:
        attributes["steadystream.failover.attempts"] = len(attempts)
    attributes["steadystream.failover.count"] = len(failovers)

    start = _unix_ns(felt)
    events: list[SpanEvent] = []
    causes: list[str] = []
    # A stream that stalls all the time is told by its counts; its events stop at a bound
    # (collectors and the SDK's own span limits drop what is past theirs anyway).
    for at_ns, gap_ns, index in _stalls(felt, config.stall_threshold_ns)[:MAX_STALL_EVENTS]:
        cause = _cause_of(failovers, at_ns - gap_ns, at_ns)
        causes.append(cause)
        events.append(
            SpanEvent(
                "steadystream.stall",
                start + at_ns,
                {
                    "steadystream.stall.duration": gap_ns / _NS,
                    "steadystream.stall.chunk_index": index,
                    "steadystream.stall.cause": cause,
                },
            )
        )
    if causes:
        attributes["steadystream.stream.stall_causes"] = causes
    for entry in failovers:
        events.append(SpanEvent("steadystream.failover", start + int(entry.get("at_ns", 0)),
                                _failover_attributes(entry)))  # fmt: skip
    events.sort(key=lambda event: event.unix_ns)

    end_offset = felt.end_ns if felt.end_ns is not None else _last(felt)
    span = StreamSpan(
        name=f"{call.operation} {request_model}",
        start_unix_ns=start,
        end_unix_ns=start + max(end_offset, 0),
        attributes=attributes,
        events=tuple(events),
        error_type=error_type,
    )

    metric_common = dict(common)
    if call.metric_model is not None:
        metric_common["gen_ai.request.model"] = call.metric_model
        if call.response_model == call.request_model:  # not mapped: the client's own name
            metric_common["gen_ai.response.model"] = call.metric_model
    measures = StreamMeasures(
        attributes=metric_common,
        outcome=outcome.value,
        streaming=call.streaming,
        duration_s=max(end_offset, 0) / _NS,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        error_type=error_type,
    )
    if call.streaming:
        measures.time_to_first_chunk_s = client.ttft_s
        measures.chunk_gaps_s = table.gaps_of(0)
        measures.worst_gap_s = user.max_gap_s
        measures.p99_gap_s = user.gap_p99_s
        measures.stalls = user.stall_count
    if server and outcome in _SUCCEEDED:
        measures.server_ttft_s = user.ttft_s
        measures.server_tpot_s = user.tpot_s
    return span, measures


def _stalls(timeline: Timeline, threshold_ns: int) -> list[tuple[int, int, int]]:
    """(end offset, length, index of the chunk that ended it) of every gap over the threshold."""
    times = timeline.times[timeline.text_mask]
    if len(times) < 2:
        return []
    gaps = np.diff(times)
    over = np.flatnonzero(gaps > threshold_ns)
    return [(int(times[i + 1]), int(gaps[i]), int(i + 1)) for i in over]


def _cause_of(failovers: Sequence[Mapping[str, Any]], begin_ns: int, end_ns: int) -> str:
    """The cause of a failover that happened inside the gap, where there was one."""
    for entry in failovers:
        at = entry.get("at_ns")
        if isinstance(at, int) and begin_ns <= at <= end_ns and entry.get("cause"):
            return str(entry["cause"])
    return "unknown"


def _failover_attributes(entry: Mapping[str, Any]) -> Attributes:
    attributes: Attributes = {}
    for key in ("cause", "from", "to", "kind", "result", "after_tokens"):
        value = entry.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            attributes[f"steadystream.failover.{key}"] = value
    return attributes


def _unix_ns(timeline: Timeline) -> int:
    return round((timeline.started_at or 0.0) * _NS)


def _last(timeline: Timeline) -> int:
    return int(timeline.times[-1]) if len(timeline.times) else 0


def _short(model: str) -> str:
    return model if len(model) <= MAX_MODEL_CHARS else model[: MAX_MODEL_CHARS - 1] + "…"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _put(attributes: Attributes, name: str, value: float | int | None) -> None:
    if value is not None:
        attributes[name] = value
