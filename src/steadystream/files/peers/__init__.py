"""Peers' result files read as timelines: vLLM bench, AIPerf, GenAI-Perf (docs/format.md#peers).

Three load testers keep every request's chunk times, so each stream can be rebuilt and looked
at as one recorded here is: ``vllm bench serve --save-result --save-detailed`` (``_vllm``),
AIPerf's ``profile_export.jsonl`` and ``profile_export_raw.jsonl`` (``_aiperf``) and
GenAI-Perf's ``profile_export.json`` (``_genai_perf``). Each is found by its content
(``_detect``), or named. What a format does not keep is marked, never made up
(``_requests``). GuideLLM's and LLMPerf's files keep per-request aggregates only: reading one
is an error that says what is missing.

    >>> detect_format("profile_export.jsonl")
    'aiperf'
    >>> read_peer("profile_export.jsonl", "aiperf").timelines
"""

from __future__ import annotations

import os

from steadystream._exceptions import InputError
from steadystream.files._jsonl import PathLike, ReadResult
from steadystream.files.peers._aiperf import AiperfReader
from steadystream.files.peers._detect import detect, refuse_aggregates
from steadystream.files.peers._genai_perf import read_genai_perf
from steadystream.files.peers._source import head
from steadystream.files.peers._vllm import read_vllm

__all__ = ["FILE_FORMATS", "PEER_FORMATS", "detect_format", "read_peer"]

PEER_FORMATS = ("vllm", "aiperf", "aiperf-raw", "genai-perf")
"""The peers' formats that are read as timelines."""
FILE_FORMATS = ("steadystream", *PEER_FORMATS)
"""Every format a run may be read from, as ``--format`` names them."""


def detect_format(path: PathLike) -> str | None:
    """What wrote the file, from its first bytes: ``steadystream``, one of
    :data:`PEER_FORMATS`, ``guidellm`` or ``llmperf`` (which cannot be imported), or None."""
    return detect(head(os.fspath(path)))


def read_peer(path: PathLike, format: str) -> ReadResult:
    """The timelines of a peer's file in ``format`` (one of :data:`PEER_FORMATS`), one per
    request; a cut-off last line of a JSONL export is reported as for a timeline file."""
    name = os.fspath(path)
    if format in ("guidellm", "llmperf"):
        refuse_aggregates(format, name)
    if format == "vllm":
        return ReadResult(read_vllm(name))
    if format == "genai-perf":
        return ReadResult(read_genai_perf(name))
    if format in ("aiperf", "aiperf-raw"):
        reader = AiperfReader(name, raw=format == "aiperf-raw")
        timelines = list(reader)
        return ReadResult(timelines, reader.truncated_line)
    raise InputError(f"unknown format {format!r}; expected one of {', '.join(PEER_FORMATS)}")
