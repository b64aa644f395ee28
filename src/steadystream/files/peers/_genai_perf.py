"""GenAI-Perf's ``profile_export.json`` (perf_analyzer's profile export) as timelines.

The document (perf_analyzer src/profile_data_exporter.cc) holds ``experiments``, each with
its ``experiment`` (``mode`` and ``value``: the concurrency or request rate) and its
``requests``: ``timestamp`` (when the request was sent, nanoseconds on the wall clock),
``response_timestamps`` (each response's arrival, the same clock) and ``response_outputs``
(one per response: ``{"response": "data: {...}"}`` as the SSE bytes of an OpenAI-compatible
stream, several events at once when they came together, or ``{"text_output": ...}`` from
Triton). Each response is one event: its kind and text come from the chunk(s) it held
(the text gives the byte sizes and, with no usage chunk, a token estimate; it is not kept).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from steadystream._exceptions import TimelineFormatError
from steadystream._types import EventKind
from steadystream.files.peers._aiperf import chunk_event
from steadystream.files.peers._requests import MAX_CHUNKS, RecordFault, request_timeline
from steadystream.files.peers._source import read_documents
from steadystream.timeline import Timeline

__all__ = ["read_genai_perf"]


def read_genai_perf(path: str) -> list[Timeline]:
    """Every request of every experiment in the file, in order."""
    (document, *more) = read_documents(path)
    if more or type(document) is not dict or type(document.get("experiments")) is not list:
        raise TimelineFormatError(
            "a GenAI-Perf export is one JSON object with a list of experiments",
            path=path,
            field="experiments",
        )
    return list(_requests(document["experiments"], path))


def _requests(experiments: list[Any], path: str) -> Iterator[Timeline]:
    for e, experiment in enumerate(experiments):
        where = f"experiments[{e}]"
        if type(experiment) is not dict or type(experiment.get("requests")) is not list:
            raise TimelineFormatError(
                f"{where} must be an object with a list of requests", path=path, field="requests"
            )
        load = experiment.get("experiment")
        peer: dict[str, Any] = {"format": "genai-perf", "experiment": e}
        if type(load) is dict:
            peer |= {
                k: load[k] for k in ("mode", "value") if type(load.get(k)) in (str, int, float)
            }
        for i, request in enumerate(experiment["requests"]):
            fault = RecordFault(path, f"{where}.requests[{i}]")
            if type(request) is not dict:
                fault.fail("a request must be a JSON object", "requests")
            yield _request(request, fault, f"genai-perf-{e}-{i}", peer | {"request": i})


def _request(
    request: dict[str, Any], fault: RecordFault, stream_id: str, peer: dict[str, Any]
) -> Timeline:
    sent = fault.stamp(request.get("timestamp"), "timestamp")
    stamps = request.get("response_timestamps")
    outputs = request.get("response_outputs")
    if type(stamps) is not list or not all(type(t) is int and 0 <= t < 2**63 for t in stamps):
        fault.fail(
            "response_timestamps must be a list of integers of nanoseconds", "response_timestamps"
        )
    if len(stamps) > MAX_CHUNKS:
        fault.fail(
            f"response_timestamps has {len(stamps):,} entries; at most {MAX_CHUNKS:,} are read",
            "response_timestamps",
        )
    if type(outputs) is not list or len(outputs) != len(stamps):
        shown = len(outputs) if type(outputs) is list else type(outputs).__name__
        fault.fail(
            f"response_outputs must be a list with one entry per response timestamp"
            f" ({len(stamps)}), not {shown}",
            "response_outputs",
        )
    kinds, texts = [], []
    completion_tokens = prompt_tokens = None
    for index, output in enumerate(outputs):
        field = f"response_outputs[{index}]"
        kind, text, usage = _output_event(output, fault, field)
        if usage is not None:
            completion_tokens = fault.count(
                usage.get("completion_tokens"),
                f"{field}.usage.completion_tokens",
                chunks=len(stamps),
            )
            prompt_tokens = fault.count(usage.get("prompt_tokens"), f"{field}.usage.prompt_tokens")
        kinds.append(int(kind))
        texts.append(text)
    times = fault.ordered(np.array(stamps, dtype=np.int64) - sent, "response_timestamps")
    return request_timeline(
        stream_id=stream_id,
        times=times,
        kinds=np.array(kinds, dtype=np.uint8),
        texts=texts,
        completion_tokens=completion_tokens,
        prompt_tokens=prompt_tokens,
        started_at=sent / 1e9,
        meta={"peer": peer},
    )


def _output_event(
    output: Any, fault: RecordFault, field: str
) -> tuple[EventKind, str, dict[str, Any] | None]:
    if type(output) is not dict:
        fault.fail(f"{field} must be an object", "response_outputs")
    text = output.get("text_output")
    if type(text) is str:  # Triton's generate: the text itself
        return (EventKind.CONTENT if text else EventKind.EMPTY), text, None
    raw = output.get("response")
    if type(raw) is not str:
        fault.fail(f"{field} must hold a response string or a text_output", "response_outputs")
    # Events that arrived together are one response: their texts are one chunk's, its kind
    # the first text's (or, with no text, the first event's that is not empty).
    seen: list[tuple[EventKind, str]] = []
    usage = None
    # SSE ends a line with CRLF, LF or CR: one line end before the events are split
    lines = raw.replace("\r\n", "\n").replace("\r", "\n")
    for event in lines.strip().split("\n\n"):
        data = "\n".join(
            line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")
        )
        if not data.strip() or data.strip() == "[DONE]":
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            fault.fail(f"{field}: the data of an SSE event is not JSON", "response_outputs")
        if type(chunk) is dict and type(chunk.get("text_output")) is str:  # Triton generate
            text = chunk["text_output"]
            seen.append((EventKind.CONTENT if text else EventKind.EMPTY, text))
            continue
        kind, text, event_usage = chunk_event(chunk)
        usage = event_usage if event_usage is not None else usage
        seen.append((kind, text))
    kinds = [kind for kind, text in seen if text] or [k for k, _ in seen if k != EventKind.EMPTY]
    return (kinds[0] if kinds else EventKind.EMPTY), "".join(t for _, t in seen), usage
