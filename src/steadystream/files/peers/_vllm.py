"""vLLM's ``vllm bench serve --save-result --save-detailed`` JSON as timelines.

The result (vllm/benchmarks/serve.py) holds parallel lists with one entry per request:
``ttfts`` (seconds), ``itls`` (a list of seconds per request: the gap before each chunk after
the first), ``output_lens`` and ``input_lens`` (tokens), ``errors`` ("" when it succeeded),
and in newer versions ``start_times`` (``time.perf_counter()`` seconds, not a wall clock)
and ``generated_texts``. A chunk here is one SSE event with ``choices``, as vLLM's client
counts them (a chat stream's role-only and finish chunks included). The whole text, when
kept, is no chunk's own: it only gives a token estimate where ``output_lens`` has none.
Runs appended to one file (``--append-result``) are one document a line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from steadystream._exceptions import TimelineFormatError
from steadystream._types import Outcome
from steadystream.files.peers._requests import (
    MAX_SPAN_NS,
    RecordFault,
    request_timeline,
    scrub_error,
)
from steadystream.files.peers._source import read_documents
from steadystream.timeline import Timeline

__all__ = ["read_vllm"]

_NS = 1e9
_REQUIRED = ("ttfts", "itls")
_OPTIONAL = ("output_lens", "input_lens", "errors", "start_times", "generated_texts")


def read_vllm(path: str) -> list[Timeline]:
    """Every request of every run in the file, in order."""
    documents = read_documents(path)
    timelines: list[Timeline] = []
    for run, document in enumerate(documents):
        prefix = "vllm" if len(documents) == 1 else f"vllm-{run}"
        timelines.extend(_run(document, path, prefix, run if len(documents) > 1 else None))
    return timelines


def _run(document: Any, path: str, prefix: str, run: int | None) -> Iterator[Timeline]:
    where = "" if run is None else f"run {run}: "
    if type(document) is not dict:
        raise TimelineFormatError(f"{where}a vLLM result must be a JSON object", path=path)
    missing = [key for key in _REQUIRED if key not in document]
    if missing:
        raise TimelineFormatError(
            f"{where}a vLLM result without {' and '.join(missing)}: it was saved without"
            " --save-detailed, which keeps them; without each request's list of gaps no"
            " stream can be rebuilt. Run `vllm bench serve --save-result --save-detailed`",
            path=path,
            field=missing[0],
        )
    columns = {key: document.get(key) for key in (*_REQUIRED, *_OPTIONAL)}
    count = len(columns["ttfts"]) if type(columns["ttfts"]) is list else -1
    for key, values in columns.items():
        if values is None and key in _OPTIONAL:
            continue
        if type(values) is not list:
            raise TimelineFormatError(
                f"{where}{key} must be a list with one entry per request", path=path, field=key
            )
        if len(values) != count:
            raise TimelineFormatError(
                f"{where}{key} has {len(values)} entries, ttfts has {count}: the lists are one"
                " entry per request",
                path=path,
                field=key,
            )
    model = document.get("model_id")
    labels = {"model": model} if type(model) is str else {}
    for index in range(count):
        fault = RecordFault(path, f"{where}request {index}")
        row = {key: None if values is None else values[index] for key, values in columns.items()}
        yield _request(row, fault, f"{prefix}-{index}", labels, index, run)


def _request(
    row: dict[str, Any],
    fault: RecordFault,
    stream_id: str,
    labels: dict[str, str],
    index: int,
    run: int | None,
) -> Timeline:
    error = row["errors"]
    if error is not None and type(error) is not str:
        fault.fail(f"errors must hold strings, not {type(error).__name__}", "errors")
    ttft = fault.number(row["ttfts"], "ttfts", unit="seconds", most=MAX_SPAN_NS / _NS)
    gaps = fault.numbers(row["itls"], "itls", scale=_NS, unit="seconds")
    if ttft > 0 or len(gaps):
        times = round(ttft * _NS) + np.concatenate(([0], np.cumsum(gaps))).astype(np.int64)
    else:
        times = np.zeros(0, dtype=np.int64)  # failed before its first chunk
        # vLLM counts a request with no chunk as failed, with the reason or "" as its error
        error = error or "no chunk arrived (vLLM counted the request as failed)"
    answer = row["generated_texts"]
    if answer is not None and type(answer) is not str:
        fault.fail(
            f"generated_texts must hold strings, not {type(answer).__name__}", "generated_texts"
        )
    start = row["start_times"]
    meta: dict[str, Any] = {"peer": {"format": "vllm", "request": index}}
    if run is not None:
        meta["peer"]["run"] = run
    if start is not None:
        meta["peer"]["start_s"] = fault.number(start, "start_times", unit="seconds")
    return request_timeline(
        stream_id=stream_id,
        times=times,
        completion_tokens=fault.count(row["output_lens"], "output_lens", chunks=len(times)) or None,
        prompt_tokens=fault.count(row["input_lens"], "input_lens"),
        answer=answer,
        outcome=Outcome.ERROR if error else Outcome.COMPLETE,
        error=scrub_error(error),
        labels=labels,
        meta=meta,
    )
