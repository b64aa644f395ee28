"""Generate examples/sample-run.jsonl: a small run that shows each kind of stutter.

    python examples/make_sample_run.py [-o examples/sample-run.jsonl]

Deterministic (seeded). Streams, as a client would record them from an OpenAI-compatible
server (role-only first chunk, content chunks, a usage chunk, then [DONE]):

- steady:        a clean ~20 ms cadence
- paused:        the same answer with one 2 s freeze mid-answer (same total time): the
                 sequence was preempted for KV space after its 100th token, waited 2 s for
                 blocks and was recomputed, then went on at its own cadence (``kv-preemption``;
                 the other streams in flight did not pause)
- head-burst:    the server held the first 30 tokens and released them at once, 240 ms
                 late, then a slower tail (``head-burst``)
- single-token:  one token per chunk with a heavy JSON envelope each
- coalesced:     four tokens per chunk

What was put in is written beside it as ground truth (``-t``, default
``sample-run.truth.jsonl`` next to the run): the same streams as the server wrote them
(``where = lab``), each gap's cause and the delay it added in the lab's truth form
(``cause`` and ``cause_ns`` annotations, docs/attribution.md#scoring), so that
``steadystream explain examples/sample-run.jsonl --truth examples/sample-run.truth.jsonl``
scores the attribution. Gaps nothing was put into have no cause.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from steadystream import Event, EventKind, Timeline, TokenSource, Where, write_timelines
from steadystream.attribution import Cause

MS = 1_000_000
Put = dict[int, tuple[Cause, int]]
"""What was put into a stream: text event index -> (cause, delay it added to the gap, ns)."""
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
    put: Put | None = None,
) -> tuple[Timeline, Timeline]:
    """The stream as the client recorded it, and as the server wrote it with its causes."""
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
    usage = {
        "prompt_tokens": 212,
        "completion_tokens": completion,
        "total_tokens": 212 + completion,
    }
    client = Timeline.from_events(
        events,
        stream_id=stream_id,
        where=Where.CLIENT,
        keep_text=False,
        header_ns=int(times[0] - 20 * MS - rng.integers(0, 10) * MS),
        first_byte_ns=events[0].time_ns,
        end_ns=end + 200_000,
        usage=usage,
        token_source=TokenSource.USAGE_ONE_PER_EVENT
        if tokens_per_chunk == 1
        else TokenSource.USAGE_PROPORTIONAL,
        labels=labels,
        started_at=started_at,
    )
    # event 0 is the role chunk, so text event k is event k + 1
    put = put or {}
    main: list[str | None] = [None] * len(events)
    delays: list[str | None] = [None] * len(events)
    for k, (cause, delay_ns) in put.items():
        main[k + 1], delays[k + 1] = cause.value, f"{cause.value}={delay_ns}"
    truth = Timeline.from_events(
        events,
        stream_id=stream_id,
        where=Where.LAB,
        keep_text=False,
        end_ns=end,
        usage=usage,
        labels=labels,
        started_at=started_at,
        annotations={"cause": main, "cause_ns": delays},
    )
    return client, truth


def sample_run(seed: int = 7) -> list[Timeline]:
    """The run as the client recorded it."""
    return [client for client, _ in _sample(seed)]


def sample_truth(seed: int = 7) -> list[Timeline]:
    """What was put into the run: its streams as the server wrote them, each gap's cause."""
    return [truth for _, truth in _sample(seed)]


def _sample(seed: int) -> list[tuple[Timeline, Timeline]]:
    rng = np.random.default_rng(seed)
    start = 1_763_700_000.0
    runs: list[tuple[Timeline, Timeline]] = []
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
        # preempted after token 100 (text event 99): the gap to the next is 2 s, not ~10 ms
        paused = np.full(199, 10.0) + jitter / 2
        preempted_ns = round((2000.0 - 10.0) * MS)
        paused[99] = 2000.0 + paused[99] - 10.0
        runs.append(
            _stream(
                f"paused-{i}",
                paused,
                labels=labels,
                started_at=start + i + 0.3,
                rng=rng,
                put={100: (Cause.KV_PREEMPTION, preempted_ns)},
            )
        )
        # the head held until 420 ms where the first token was ready at 180 ms
        burst = np.concatenate([np.full(29, 0.2), 35 + rng.normal(0, 2, 120).clip(-6, 6)])
        runs.append(
            _stream(
                f"head-burst-{i}",
                burst,
                ttft_ms=420,
                labels=labels,
                started_at=start + i + 0.5,
                rng=rng,
                put={0: (Cause.HEAD_BURST, (420 - 180) * MS)},
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
    parser.add_argument(
        "-t",
        "--truth",
        type=Path,
        help="where the ground truth goes (default: OUTPUT's name with .truth.jsonl)",
    )
    args = parser.parse_args()
    truth = args.truth or args.output.with_name(
        args.output.name.removesuffix(".jsonl") + ".truth.jsonl"
    )
    runs = _sample(7)
    count = write_timelines(args.output, [client for client, _ in runs])
    write_timelines(truth, [lab for _, lab in runs])
    print(f"wrote {count} streams to {args.output}, and what was put in them to {truth}")


if __name__ == "__main__":
    main()
