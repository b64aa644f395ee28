"""The command-line options several commands share, each declared once: type, default, check
and :class:`~steadystream._flags.Flag`.

A model takes one as a field and writes no default of its own (``stall_threshold:
StallThreshold``): the default is part of the definition, a ``Field(default=...)`` inside the
``Annotated`` (pydantic honours it), so ``analyze``, ``report``, ``gate`` and ``bench`` cannot
drift apart. Where a command shows it is the command's layout, a
:class:`~steadystream._flags.Panel`. The groups commands take these in (the metric settings,
Ray, a server's address) are in :mod:`steadystream.cli._groups`; bench's
:class:`~steadystream.bench.config.BenchConfig` uses the types directly.

An option with the same name in two commands but another meaning in each (``--seed`` says
what it seeds, ``--output`` what is written there) is each command's own, not one of these;
tests/cli/test_options_once.py holds the list and the reasons.

Only pydantic and the duration parser are imported, so ``--help`` stays instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from steadystream._clock import NS_PER_MS, NS_PER_S
from steadystream._flags import Flag
from steadystream._validation import Duration, Texts

__all__ = [
    "FileFormat",
    "FluidityDeadline",
    "FluidityFirstDeadline",
    "FluidityForm",
    "Host",
    "Inject",
    "JsonOutput",
    "KeepText",
    "MaxRegression",
    "Only",
    "Port",
    "QoeExpectedTtft",
    "QoeForm",
    "QoePace",
    "RayAddress",
    "RayFiles",
    "StallThreshold",
    "TimelineFiles",
    "TruthRecord",
    "TtftTarget",
    "Worst",
]


def _above_zero(ns: int) -> int:
    if ns <= 0:
        raise ValueError("must be above zero")
    return ns


_Positive = Annotated[Duration, AfterValidator(_above_zero)]

# What metrics are measured against (steadystream.metrics.MetricConfig has the same defaults:
# docs/metrics.md#defaults).
StallThreshold = Annotated[
    _Positive,
    Field(default=400 * NS_PER_MS),
    Flag("A gap above this is a stall (and breaks ITL goodput).", text=True),
]
TtftTarget = Annotated[
    _Positive, Field(default=800 * NS_PER_MS), Flag("TTFT target for ITL goodput.", text=True)
]
QoeExpectedTtft = Annotated[
    _Positive,
    Field(default=1 * NS_PER_S),
    Flag("Andes QoE: when the reader expects the first token (T_e).", text=True),
]
QoePace = Annotated[
    _Positive,
    Field(default=100 * NS_PER_MS),
    Flag("Andes QoE: the reader's time per token (L); 100ms reads 10 tokens/s.", text=True),
]
QoeForm = Annotated[
    Literal["exact", "discrete"],
    Field(default="exact"),
    Flag("Andes QoE: 'exact' (the reader model) or 'discrete' (docs/metrics.md#qoe)."),
]
FluidityFirstDeadline = Annotated[
    _Positive,
    Field(default=100 * NS_PER_MS),
    Flag("Etalon fluidity: the first token's deadline from the request (D_p).", text=True),
]
FluidityDeadline = Annotated[
    _Positive,
    Field(default=50 * NS_PER_MS),
    Flag("Etalon fluidity: each later token's deadline (D_d).", text=True),
]
FluidityForm = Annotated[
    Literal["documented", "code"],
    Field(default="documented"),
    Flag(
        "Etalon fluidity: 'documented' (the paper, one miss per late token) or 'code'"
        " (Etalon's code: a late token misses one deadline per D_d it overran)."
    ),
]

# Reading recorded runs, and saying what they hold
TimelineFiles = Annotated[
    list[Path],
    Flag(
        "Timeline files (.jsonl, .jsonl.gz, .parquet), or folders of them (searched recursively).",
        argument=True,
    ),
]
FileFormat = Annotated[
    Literal["auto", "steadystream", "vllm", "aiperf", "aiperf-raw", "genai-perf"],
    Field(default="auto"),
    Flag(
        "What the files are: found from their content (auto), or steadystream timelines, or a"
        " peer's results: vllm (bench serve --save-detailed), aiperf (profile_export.jsonl),"
        " aiperf-raw (profile_export_raw.jsonl), genai-perf (profile_export.json).",
        names=("--format",),
    ),
]
JsonOutput = Annotated[
    bool, Field(default=False), Flag("Print JSON for scripts.", names=("--json",))
]
Worst = Annotated[int, Field(default=10, ge=0), Flag("How many of the worst streams to list.")]
MaxRegression = Annotated[
    Texts,
    Field(default=()),
    Flag(
        "METRIC=LIMIT, e.g. p99_of_p99=10%, goodput=-2pt, ttft_p95=50ms; repeat or"
        " comma-separate. Replaces the default limit of the same metric.",
        names=("--max-regression", "-r"),
        metavar="METRIC=LIMIT",
    ),
]

# Ray
RayFiles = Annotated[
    bool,
    Field(default=False),
    Flag(
        "Read the files in parallel, Ray tasks per file (needs the ray extra; a local Ray"
        " unless RAY_ADDRESS or --ray-address says where). The same result as without it.",
        names=("--ray",),
    ),
]
RayAddress = Annotated[
    str | None,
    Field(default=None),
    Flag("The Ray cluster to run on (implies --ray), e.g. ray://head:10001.", metavar="ADDRESS"),
]

# Servers and what they play or record
Host = Annotated[str, Field(default="127.0.0.1"), Flag("Address to bind.")]
Port = Annotated[int, Field(default=8000, ge=0, le=65535), Flag("Port to listen on.")]
TruthRecord = Annotated[
    Path | None,
    Field(default=None),
    Flag(
        "Append each finished request's ground-truth timeline to this JSONL (explain --truth"
        " scores against it).",
        names=("--record",),
    ),
]
KeepText = Annotated[
    bool, Field(default=False), Flag("Store the answers' text in the recorded timelines.")
]
Inject = Annotated[
    Texts,
    Field(default=()),
    Flag(
        "A fault to inject, e.g. pause:2s@50%, pause:1.5s@token=40, burst:30@start,"
        " jitter:20ms, stall:forever@60%, truncate@80% (repeatable).",
        names=("--inject", "-i"),
        metavar="FAULT",
    ),
]
Only = Annotated[
    Texts,
    Field(default=()),
    Flag(
        "Play only the recorded streams whose id matches (steady-*; repeatable).",
        metavar="PATTERN",
    ),
]
