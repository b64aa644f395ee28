"""Synthetic stream timelines for benchmarks: many streams, built with whole-array numpy ops.

Each stream opens with a role-only chunk at its time to first byte, then content chunks at a
steady per-stream cadence (20-40 ms, with noise), and ends with a usage chunk. For variety, a
share of streams freeze once mid-stream (0.5-3 s), some chunks carry several tokens, and a few
streams end in an error instead of usage. Streams are made in batches, each from its own seed,
so a run is reproducible and memory stays bounded however many streams are asked for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from steadystream import EventKind, Outcome, Timeline, TokenSource, Where
from steadystream.files import write_jsonl

__all__ = ["iter_synthetic", "synthetic_timelines", "write_synthetic_jsonl"]

BATCH_STREAMS = 10_000
PAUSE_SHARE = 0.08
MULTI_TOKEN_SHARE = 0.05
ERROR_SHARE = 0.01
_MODELS = ("lab-small", "lab-large")
_TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
_START_WALL = 1_763_700_000.0  # a fixed wall clock, so files are byte-for-byte reproducible


def synthetic_timelines(
    streams: int = 100_000, chunks: int = 200, *, seed: int = 0, prefix: str = "syn"
) -> list[Timeline]:
    """``streams`` timelines of ``chunks`` events each (role and usage chunks included),
    with stream ids ``{prefix}-00000000`` on."""
    return [t for batch in iter_synthetic(streams, chunks, seed=seed, prefix=prefix) for t in batch]


def iter_synthetic(
    streams: int = 100_000, chunks: int = 200, *, seed: int = 0, prefix: str = "syn"
) -> Iterator[list[Timeline]]:
    """The same timelines as :func:`synthetic_timelines`, a batch at a time."""
    if chunks < 2:
        raise ValueError("chunks must be at least 2: a role chunk and a usage chunk")
    for index, first in enumerate(range(0, streams, BATCH_STREAMS)):
        count = min(BATCH_STREAMS, streams - first)
        yield _batch(np.random.default_rng([seed, index]), first, count, chunks, prefix)


def write_synthetic_jsonl(
    path: str | os.PathLike[str],
    streams: int = 100_000,
    chunks: int = 200,
    *,
    seed: int = 0,
    prefix: str = "syn",
) -> int:
    """Write the synthetic timelines to a JSONL file a batch at a time; return the events."""
    events = 0
    with open(path, "wb") as file:
        for batch in iter_synthetic(streams, chunks, seed=seed, prefix=prefix):
            write_jsonl(file, batch)
            events += sum(len(t) for t in batch)
    return events


def _batch(rng: np.random.Generator, first: int, n: int, m: int, prefix: str) -> list[Timeline]:
    cadence = rng.uniform(20e6, 40e6, size=(n, 1))
    gaps = cadence * rng.lognormal(0.0, 0.3, size=(n, m))
    gaps[:, 0] = rng.lognormal(np.log(300e6), 0.5, size=n)  # time to the role chunk
    if m > 2:
        gaps[:, 1] = rng.uniform(0.1e6, 2e6, size=n)  # the first token follows the role chunk
    gaps[:, -1] = rng.uniform(0.2e6, 1e6, size=n)  # usage right after the last token
    paused = np.flatnonzero(rng.random(n) < PAUSE_SHARE)
    if m > 4 and paused.size:
        where = rng.integers(m // 4, 3 * m // 4, size=paused.size)
        gaps[paused, where] += rng.uniform(0.5e9, 3e9, size=paused.size)
    times = np.cumsum(gaps, axis=1).astype(np.int64)

    tokens = np.ones((n, m), dtype=np.int32)
    multi = rng.random((n, m)) < MULTI_TOKEN_SHARE
    tokens[multi] = rng.integers(2, 5, size=int(multi.sum()), dtype=np.int32)
    tokens[:, 0] = 0
    tokens[:, -1] = 0
    text_bytes = tokens * rng.integers(2, 7, size=(n, m), dtype=np.int32)
    wire_bytes = text_bytes + np.int32(140) + rng.integers(0, 20, size=(n, m), dtype=np.int32)
    wire_bytes[:, 0] = 120
    wire_bytes[:, -1] = 260
    kinds = np.full((n, m), EventKind.CONTENT, dtype=np.uint8)
    kinds[:, 0] = EventKind.ROLE
    kinds[:, -1] = EventKind.USAGE
    failed = rng.random(n) < ERROR_SHARE
    kinds[failed, -1] = EventKind.ERROR

    completion = tokens.sum(axis=1).tolist()
    prompt = rng.integers(20, 2000, size=n).tolist()
    header = (times[:, 0] * rng.uniform(0.3, 0.9, size=n)).astype(np.int64).tolist()
    first_byte = times[:, 0].tolist()
    end = (times[:, -1] + 100_000).tolist()
    started = (_START_WALL + (first + np.arange(n)) * 0.05).tolist()
    model = rng.integers(0, len(_MODELS), size=n).tolist()
    tenant = rng.integers(0, len(_TENANTS), size=n).tolist()
    return [
        Timeline(
            stream_id=f"{prefix}-{first + i:08d}",
            where=Where.CLIENT,
            times=times[i],
            tokens=tokens[i],
            wire_bytes=wire_bytes[i],
            text_bytes=text_bytes[i],
            kinds=kinds[i],
            header_ns=header[i],
            first_byte_ns=first_byte[i],
            end_ns=end[i],
            outcome=Outcome.ERROR if failed[i] else Outcome.COMPLETE,
            error="upstream reset the stream" if failed[i] else None,
            usage=None
            if failed[i]
            else {
                "prompt_tokens": prompt[i],
                "completion_tokens": completion[i],
                "total_tokens": prompt[i] + completion[i],
            },
            token_source=TokenSource.EXACT,
            labels={
                "model": _MODELS[model[i]],
                "route": "/v1/chat/completions",
                "tenant": _TENANTS[tenant[i]],
            },
            started_at=started[i],
        )
        for i in range(n)
    ]
