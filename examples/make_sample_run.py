"""Generate examples/sample-run.jsonl: a small run that shows each kind of stutter.

    python examples/make_sample_run.py [-o examples/sample-run.jsonl]

Deterministic (seeded). Streams, as a client would record them from an OpenAI-compatible
server (role-only first chunk, content chunks, a usage chunk, then [DONE]):

- steady:        a clean ~20 ms cadence
- paused:        the same answer with one 2 s freeze mid-answer (same total time)
- head-burst:    the first 30 tokens at once, then a slower tail
- single-token:  one token per chunk with a heavy JSON envelope each
- coalesced:     four tokens per chunk
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from steadystream import Event, EventKind, Timeline, TokenSource, Where, write_timelines

MS = 1_000_000
WORDS = [
    "the",
    "stream",
    "stalls",
    "when",
    "the",
    "scheduler",
    "admits",
    "a",
    "long",
    "prompt",
    ",",
    "and",
    "the",
    "reader",
    "notices",
    "every",
    "pause",
    ".",
    "but",
    "a",
    "steady",
    "cadence",
    "reads",
    "calm",
    ",",
    "or",
    "so",
    "the",
    "users",
    "say",
    ".",
]
ENVELOPE = 118  # bytes of JSON and SSE framing around each chunk's text


def _stream(
    stream_id: str,
    gaps_ms: np.ndarray,
    *,
    tokens_per_chunk: int = 1,
    ttft_ms: float = 180.0,
    labels: dict[str, str],
    started_at: float,
    rng: np.random.Generator,
) -> Timeline:
    times = (ttft_ms + np.concatenate([[0.0], np.cumsum(gaps_ms)])) * MS
    events = [Event(int(times[0] - 2 * MS), "", 0, EventKind.ROLE, 96)]
    for i, t in enumerate(times):
        words = [WORDS[(i * tokens_per_chunk + k) % len(WORDS)] for k in range(tokens_per_chunk)]
        text = " " + " ".join(words)
        events.append(
            Event(int(t), text, tokens_per_chunk, EventKind.CONTENT, ENVELOPE + len(text.encode()))
        )
    end = int(times[-1] + 3 * MS)
    events.append(Event(end, "", 0, EventKind.USAGE, 150))
    completion = tokens_per_chunk * len(times)
    return Timeline.from_events(
        events,
        stream_id=stream_id,
        where=Where.CLIENT,
        keep_text=False,
        header_ns=int(times[0] - 20 * MS - rng.integers(0, 10) * MS),
        first_byte_ns=events[0].time_ns,
        end_ns=end + 200_000,
        usage={
            "prompt_tokens": 212,
            "completion_tokens": completion,
            "total_tokens": 212 + completion,
        },
        token_source=TokenSource.USAGE_ONE_PER_EVENT
        if tokens_per_chunk == 1
        else TokenSource.USAGE_PROPORTIONAL,
        labels=labels,
        started_at=started_at,
    )


def sample_run(seed: int = 7) -> list[Timeline]:
    rng = np.random.default_rng(seed)
    start = 1_763_700_000.0
    runs: list[Timeline] = []
    for i in range(6):
        labels = {
            "model": "lab",
            "route": "/v1/chat/completions",
            "tenant": "acme" if i % 2 else "globex",
        }
        jitter = rng.normal(0, 1.5, 199).clip(-8, 8)
        runs.append(
            _stream(f"steady-{i}", 20 + jitter, labels=labels, started_at=start + i, rng=rng)
        )
        paused = np.full(199, 10.0) + jitter / 2
        paused[99] = 2000.0 + paused[99] - 10.0
        runs.append(
            _stream(f"paused-{i}", paused, labels=labels, started_at=start + i + 0.3, rng=rng)
        )
        burst = np.concatenate([np.full(29, 0.2), 35 + rng.normal(0, 2, 120).clip(-6, 6)])
        runs.append(
            _stream(
                f"head-burst-{i}",
                burst,
                ttft_ms=420,
                labels=labels,
                started_at=start + i + 0.5,
                rng=rng,
            )
        )
        runs.append(
            _stream(
                f"single-token-{i}",
                12 + rng.normal(0, 1, 249).clip(-3, 3),
                labels={**labels, "route": "/v1/completions"},
                started_at=start + i + 0.6,
                rng=rng,
            )
        )
        runs.append(
            _stream(
                f"coalesced-{i}",
                80 + rng.normal(0, 4, 49).clip(-10, 10),
                tokens_per_chunk=4,
                labels=labels,
                started_at=start + i + 0.8,
                rng=rng,
            )
        )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-o", "--output", type=Path, default=Path(__file__).with_name("sample-run.jsonl")
    )
    args = parser.parse_args()
    count = write_timelines(args.output, sample_run())
    print(f"wrote {count} streams to {args.output}")


if __name__ == "__main__":
    main()
