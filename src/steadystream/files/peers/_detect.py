"""Which tool wrote a file, told from its first bytes; and the files that cannot be imported.

The keys of the JSON objects in the first :data:`~._source.HEAD_BYTES` decide (a key is a
quoted name after ``{`` or ``,`` and before ``:``; the same words inside a string are
escaped, so an answer that mentions ``"itls"`` does not count). The format's own reader then
checks every field it needs, and says which one is missing.
"""

from __future__ import annotations

import re
from typing import NoReturn

from steadystream._exceptions import TimelineFormatError

__all__ = ["detect", "refuse_aggregates"]

_KEY = re.compile(rb'[{,]\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*:')

# The tools whose files keep only per-request aggregates: what they keep, what is missing.
_AGGREGATES = {
    "guidellm": (
        "a GuideLLM benchmarks file",
        "each request's start_time, first_token_time and last_token_time, and its"
        " inter_token_latency_ms as one mean",
    ),
    "llmperf": (
        "an LLMPerf results file (*_individual_responses.json or *_summary.json)",
        "each request's ttft_s, end_to_end_latency_s and inter_token_latency_s as one mean"
        " (or, in the summary, only their quantiles across requests)",
    ),
}


def detect(head: bytes) -> str | None:
    """The format of a file that starts with ``head``: ``steadystream``, a peer's format
    (``vllm``, ``aiperf``, ``aiperf-raw``, ``genai-perf``), one of the tools whose files
    cannot be imported (``guidellm``, ``llmperf``), or None when nothing fits."""
    keys = set(_KEY.findall(head))
    if b"schema" in keys and b"steadystream.timeline" in head:
        return "steadystream"
    if b"benchmarks" in keys:
        return "guidellm"
    if keys & {b"ttft_s", b"inter_token_latency_s", b"end_to_end_latency_s"} or any(
        key.startswith(b"results_") for key in keys
    ):
        return "llmperf"
    if b"metadata" in keys and (b"perf_ns" in keys or b"start_perf_ns" in keys):
        return "aiperf-raw"
    if b"metadata" in keys and keys & {b"metrics", b"request_start_ns"}:
        return "aiperf"
    if b"experiments" in keys and keys & {b"experiment", b"requests", b"response_timestamps"}:
        return "genai-perf"
    if keys & {b"ttfts", b"itls"} or {b"backend", b"num_prompts"} <= keys:
        return "vllm"
    return None


def refuse_aggregates(tool: str, path: str) -> NoReturn:
    """The error for a file of a tool that keeps no per-chunk times."""
    what, kept = _AGGREGATES[tool]
    raise TimelineFormatError(
        f"{what}: it keeps {kept}, and no time of any chunk between the first and the last,"
        " so no stream's gaps can be rebuilt from it (a freeze mid-answer is averaged away)."
        " Missing: a list of every chunk's arrival per request. Import a file that keeps"
        " one instead: vLLM's `vllm bench serve --save-result --save-detailed`, AIPerf's"
        " profile_export.jsonl, GenAI-Perf's profile_export.json, or run `steadystream bench`",
        path=path,
    )
