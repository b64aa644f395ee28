"""NVIDIA AIPerf's per-request exports as timelines, read a line at a time.

``profile_export.jsonl`` (``--export-level records``, the default) has one record a request:
``metadata`` (``x_request_id``, ``request_start_ns`` on the wall clock, ``was_cancelled``),
``metrics`` (each ``{"value": ..., "unit": "ms"}``: ``time_to_first_token``,
``inter_chunk_latency`` as the list of gaps between content chunks, ``request_latency``,
``output_token_count``, ``input_sequence_length``) and ``error`` (null, or its ``type``,
``code`` and ``message``). The chunks' times are the first token's plus the running sum of
the gaps, so each stream's gaps are AIPerf's own; their text is not kept.

``profile_export_raw.jsonl`` (``--export-level raw``) has what AIPerf received instead:
``start_perf_ns`` and ``responses``, each with its ``perf_ns`` and the SSE fields it held
(``packets`` of ``name`` and ``value``), so every event is rebuilt with its kind and text
(used for the token counts, not kept). The request's headers and payload are never read
past the model's name: a key sent in a header stays out of every timeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from steadystream._types import EventKind, Outcome
from steadystream.files.peers._requests import (
    MAX_CHUNKS,
    RecordFault,
    request_timeline,
    scrub_error,
)
from steadystream.files.peers._source import JsonLines
from steadystream.timeline import Timeline

__all__ = ["AiperfReader", "chunk_event"]

_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9}
_COUNTS = ("tokens", "count")


class AiperfReader:
    """The timelines of an AIPerf export, one line at a time; ``raw`` for the raw export.

    Once iteration ends, :attr:`truncated_line` holds the number of a cut-off last line.
    """

    def __init__(self, path: str, *, raw: bool = False) -> None:
        self.path = path
        self.raw = raw
        self._lines = JsonLines(path)

    @property
    def truncated_line(self) -> int | None:
        return self._lines.truncated_line

    def __iter__(self) -> Iterator[Timeline]:
        read = _raw_record if self.raw else _record
        for number, record in self._lines:
            fault = RecordFault(self.path, f"line {number}", line=number)
            if type(record) is not dict:
                fault.fail("a record must be a JSON object", "metadata")
            yield read(record, fault, number)


def _metadata(
    record: dict[str, Any], fault: RecordFault, number: int
) -> tuple[str, dict[str, Any]]:
    metadata = record.get("metadata")
    if type(metadata) is not dict:
        fault.fail("metadata must be an object (AIPerf writes one per record)", "metadata")
    request_id = metadata.get("x_request_id")
    stream_id = request_id if type(request_id) is str and request_id else f"aiperf-{number}"
    return stream_id, metadata


def _started_at(metadata: dict[str, Any], fault: RecordFault) -> float | None:
    start = metadata.get("request_start_ns")
    if start is None:
        return None
    return fault.number(start, "metadata.request_start_ns", unit="nanoseconds") / 1e9


def _outcome(record: dict[str, Any], metadata: dict[str, Any]) -> tuple[Outcome, str | None]:
    error = record.get("error")
    if error:
        if type(error) is dict:
            said = [str(error.get(k)) for k in ("type", "code") if error.get(k) is not None]
            message = error.get("message")
            text = f"{' '.join(said)}: {message}" if said else message
        else:
            text = error
        return Outcome.ERROR, scrub_error(text)
    if metadata.get("was_cancelled") is True:
        return Outcome.CANCELLED, None
    return Outcome.COMPLETE, None


def _metric(
    metrics: dict[str, Any], name: str, fault: RecordFault, *, time: bool
) -> tuple[Any, float] | None:
    """A metric's value and the factor that turns its unit into nanoseconds (1 for a count).

    A time must say its unit (AIPerf writes each metric's): one with none, or a count's, has
    no scale that is not a guess. A count may leave it out.
    """
    entry = metrics.get(name)
    if entry is None:
        return None
    field = f"metrics.{name}"
    if type(entry) is not dict or "value" not in entry:
        fault.fail(f"{field} must be an object with a value and a unit", field)
    unit = entry.get("unit")
    if not time:
        if unit is not None and unit not in _COUNTS:
            fault.fail(
                f"{field}.unit must be one of {', '.join(_COUNTS)}, not {unit!r} (it is a count)",
                field,
            )
        return entry["value"], 1.0
    scale = _TO_NS.get(unit) if type(unit) is str else None
    if scale is None:
        shown = "missing" if unit is None else repr(unit)
        fault.fail(
            f"{field}.unit must be one of {', '.join(_TO_NS)}, not {shown} (a time's unit is"
            " never guessed)",
            field,
        )
    return entry["value"], scale


def _record(record: dict[str, Any], fault: RecordFault, number: int) -> Timeline:
    stream_id, metadata = _metadata(record, fault, number)
    metrics = record.get("metrics") or {}  # null for a failed request, AIPerf's docs say
    if type(metrics) is not dict:
        fault.fail("metrics must be an object of {value, unit} entries", "metrics")
    times = np.zeros(0, dtype=np.int64)
    ttft = _metric(metrics, "time_to_first_token", fault, time=True)
    icl = _metric(metrics, "inter_chunk_latency", fault, time=True)
    if ttft is None and icl is not None:
        # The gaps are timed from the first chunk: without its time no chunk has one, and a
        # stall among them would vanish into a stream with no chunk at all.
        fault.fail(
            "metrics.inter_chunk_latency without metrics.time_to_first_token: the gaps run"
            " from the first chunk, whose time is missing",
            "metrics.time_to_first_token",
        )
    if ttft is not None:
        first = fault.span(ttft[0], "metrics.time_to_first_token", scale=ttft[1], unit="its unit")
        times = np.array([first], dtype=np.int64)
        if icl is not None:
            field = "metrics.inter_chunk_latency"
            gaps = fault.numbers(icl[0], field, scale=icl[1], unit="its unit")
            times = times[0] + np.concatenate(([0], np.cumsum(gaps))).astype(np.int64)
    latency = _metric(metrics, "request_latency", fault, time=True)
    end_ns = None
    if latency is not None:
        end_ns = fault.span(
            latency[0], "metrics.request_latency", scale=latency[1], unit="its unit"
        )
    outcome, error = _outcome(record, metadata)
    if not metrics and outcome is Outcome.COMPLETE:
        # No error and no metric at all: no request AIPerf measured. It writes none for a
        # failed one, so such a record is no complete stream (it would count as one
        # with no token, on time).
        outcome, error = Outcome.ERROR, "the record has no metrics and no error: not measured"
    return request_timeline(
        stream_id=stream_id,
        times=times,
        completion_tokens=_tokens(
            metrics, ("output_token_count", "usage_completion_tokens"), fault, chunks=len(times)
        ),
        prompt_tokens=_tokens(metrics, ("input_sequence_length", "usage_prompt_tokens"), fault),
        end_ns=end_ns,
        outcome=outcome,
        error=error,
        started_at=_started_at(metadata, fault),
        meta={"peer": {"format": "aiperf", "line": number}},
    )


def _tokens(
    metrics: dict[str, Any], names: tuple[str, ...], fault: RecordFault, chunks: int | None = None
) -> int | None:
    for name in names:
        found = _metric(metrics, name, fault, time=False)
        if found is not None:
            return fault.count(found[0], f"metrics.{name}", chunks=chunks)
    return None


def _raw_record(record: dict[str, Any], fault: RecordFault, number: int) -> Timeline:
    stream_id, metadata = _metadata(record, fault, number)
    start = fault.stamp(record.get("start_perf_ns"), "start_perf_ns")
    responses = record.get("responses")
    if type(responses) is not list:
        fault.fail("responses must be a list (AIPerf writes one entry a response)", "responses")
    if len(responses) > MAX_CHUNKS:
        fault.fail(
            f"responses has {len(responses):,} entries; at most {MAX_CHUNKS:,} are read",
            "responses",
        )
    stamps, kinds, texts = [], [], []
    completion_tokens = prompt_tokens = None
    for index, response in enumerate(responses):
        field = f"responses[{index}]"
        if type(response) is not dict or type(response.get("perf_ns")) is not int:
            fault.fail(f"{field} must be an object with an integer perf_ns", field)
        fault.stamp(response["perf_ns"], f"{field}.perf_ns")
        kind, text, usage = _response_event(response, fault, field)
        if usage is not None:
            completion_tokens = fault.count(
                usage.get("completion_tokens"),
                f"{field}.usage.completion_tokens",
                chunks=len(responses),
            )
            prompt_tokens = fault.count(usage.get("prompt_tokens"), f"{field}.usage.prompt_tokens")
        stamps.append(response["perf_ns"] - start)
        kinds.append(int(kind))
        texts.append(text)
    times = fault.ordered(np.array(stamps, dtype=np.int64), "responses")
    outcome, error = _outcome(record, metadata)
    payload = record.get("payload")
    model = payload.get("model") if type(payload) is dict else None
    return request_timeline(
        stream_id=stream_id,
        times=times,
        kinds=np.array(kinds, dtype=np.uint8),
        texts=texts,
        completion_tokens=completion_tokens,
        prompt_tokens=prompt_tokens,
        outcome=outcome,
        error=error,
        started_at=_started_at(metadata, fault),
        labels={"model": model} if type(model) is str else {},
        meta={"peer": {"format": "aiperf-raw", "line": number}},
    )


def _response_event(
    response: dict[str, Any], fault: RecordFault, field: str
) -> tuple[EventKind, str, dict[str, Any] | None]:
    packets = response.get("packets")
    if packets is None:  # a whole (not streamed) response's text
        text = response.get("text")
        return (
            (EventKind.CONTENT, text, None)
            if type(text) is str and text
            else (EventKind.EMPTY, "", None)
        )
    if type(packets) is not list:
        fault.fail(f"{field}.packets must be a list of SSE fields", f"{field}.packets")
    data = [p.get("value") for p in packets if type(p) is dict and p.get("name") == "data"]
    if not data:
        return EventKind.KEEPALIVE, "", None  # a comment, or an event with no data
    value = "\n".join(v for v in data if type(v) is str)
    if value.strip() == "[DONE]":
        return EventKind.EMPTY, "", None
    try:
        chunk = orjson.loads(value)
    except orjson.JSONDecodeError:
        fault.fail(f"{field}: the data of an SSE event is not JSON", f"{field}.packets")
    return chunk_event(chunk)


def chunk_event(chunk: Any) -> tuple[EventKind, str, dict[str, Any] | None]:
    """The kind and text of one decoded stream chunk, and the usage it carries.

    OpenAI chat and completions chunks, the Responses API's text deltas and Anthropic's
    content deltas; anything else is an empty event (it arrived, it carried no text).
    """
    if type(chunk) is not dict:
        return EventKind.EMPTY, "", None
    if chunk.get("error"):
        return EventKind.ERROR, "", None
    usage = chunk.get("usage") if type(chunk.get("usage")) is dict else None
    choices = chunk.get("choices")
    if type(choices) is list and choices and type(choices[0]) is dict:
        choice = choices[0]
        found = choice.get("delta")
        delta: dict[str, Any] = found if type(found) is dict else {}
        text = delta.get("content") or choice.get("text")
        if type(text) is str and text:
            return EventKind.CONTENT, text, usage
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if type(reasoning) is str and reasoning:
            return EventKind.REASONING, reasoning, usage
        calls = delta.get("tool_calls")
        if type(calls) is list and calls:
            return EventKind.TOOL_CALL, "".join(map(_arguments, calls)), usage
        if delta.get("role") and len(delta) <= 2:
            return EventKind.ROLE, "", usage
        return EventKind.EMPTY, "", usage
    kind = chunk.get("type")
    if kind == "response.output_text.delta" and type(chunk.get("delta")) is str:
        return EventKind.CONTENT, chunk["delta"], None
    if kind == "content_block_delta" and type(chunk.get("delta")) is dict:
        delta = chunk["delta"]
        if type(delta.get("text")) is str:
            return EventKind.CONTENT, delta["text"], None
        if type(delta.get("thinking")) is str:
            return EventKind.REASONING, delta["thinking"], None
    if usage is not None:
        return EventKind.USAGE, "", usage
    return EventKind.EMPTY, "", None


def _arguments(call: Any) -> str:
    """The text of a tool call's arguments in one chunk: what the reader sees grow; a
    ``function`` that is no object (a stream that names the function alone) holds none."""
    function = call.get("function") if type(call) is dict else None
    arguments = function.get("arguments") if type(function) is dict else None
    return str(arguments or "")
