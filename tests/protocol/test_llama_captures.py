"""Bytes captured from a real llama.cpp server, replayed through StreamRecorder.

The captures (tests/integration/data, described in its README) carry the quirks a real engine
has: no role chunk on completions, a role chunk without content on chat, a finish chunk with
empty text or an empty delta, no usage chunk even when asked for, ``: ping`` comments, and
``[DONE]`` as the last event (here tried also without its final newlines, and missing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steadystream import EventKind, Outcome, Timeline, TokenSource
from steadystream.metrics import stream_metrics
from steadystream.protocol import StreamRecorder

DATA = Path(__file__).resolve().parents[1] / "integration" / "data"
COMPLETIONS = (DATA / "llama-completions.sse").read_bytes()
CHAT = (DATA / "llama-chat.sse").read_bytes()
PING = (DATA / "llama-ping.sse").read_bytes()
C, R, N, K = EventKind.CONTENT, EventKind.ROLE, EventKind.EMPTY, EventKind.KEEPALIVE


def record(body: bytes, *, split: int | None = None, max_tokens: int | None = None) -> Timeline:
    """One read per ``split`` bytes (all at once by default), 1 ms apart."""
    recorder = StreamRecorder("llama", "client", keep_text=True, max_tokens=max_tokens)
    step = split or len(body)
    reads = [body[i : i + step] for i in range(0, len(body), step)]
    for i, data in enumerate(reads):
        recorder.feed((i + 1) * 1_000_000, data)
    return recorder.finish((len(reads) + 1) * 1_000_000)


def kinds(timeline: Timeline) -> list[EventKind]:
    return [EventKind(int(k)) for k in timeline.kinds]


@pytest.mark.parametrize("split", [None, 1, 7, 64])
def test_a_completion_stream_however_it_is_cut(split: int | None) -> None:
    timeline = record(COMPLETIONS, split=split)
    # No role chunk: completions start with text. The finish chunk has empty text.
    assert kinds(timeline) == [C] * 6 + [N]
    assert "".join(timeline.texts or []) == " the capital of France. It"
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.error is None
    # No usage on the wire: counts come from the text, and every report says so.
    assert timeline.usage is None
    assert timeline.token_source is TokenSource.ESTIMATED
    assert stream_metrics(timeline).chunks == 6


def test_a_capture_cut_at_max_tokens_counts_exactly_max_tokens() -> None:
    # The capture asked for max_tokens 6 and stopped for length: six tokens, one a chunk,
    # where the estimate from its text says otherwise.
    assert record(COMPLETIONS).total_tokens != 6
    timeline = record(COMPLETIONS, max_tokens=6)
    assert timeline.token_source is TokenSource.MAX_TOKENS
    assert timeline.tokens[timeline.text_mask].tolist() == [1] * 6
    assert stream_metrics(timeline).tokens_per_chunk == 1.0


def test_done_without_its_final_newlines_still_ends_the_stream() -> None:
    cut = COMPLETIONS.rstrip(b"\n")
    assert cut.endswith(b"data: [DONE]")
    timeline = record(cut)
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.end_ns == 1_000_000  # the read that carried [DONE]


def test_a_finish_reason_without_done_is_complete() -> None:
    body = COMPLETIONS[: COMPLETIONS.index(b"data: [DONE]")]
    timeline = record(body)
    assert timeline.outcome is Outcome.COMPLETE


def test_a_body_cut_mid_answer_is_truncated() -> None:
    body = COMPLETIONS[: COMPLETIONS.index(b'"finish_reason": "length"')]
    timeline = record(body)
    assert timeline.outcome is Outcome.TRUNCATED
    assert timeline.error is not None
    assert "without [DONE]" in timeline.error


def test_a_chat_stream_with_a_role_chunk_and_no_answer() -> None:
    timeline = record(CHAT)
    # {"role": "assistant"} without content, then {} with finish_reason "stop".
    assert kinds(timeline) == [R, N]
    assert timeline.outcome is Outcome.COMPLETE
    metrics = stream_metrics(timeline)
    assert metrics.ttfb_s == 0.001  # the role chunk is the first byte
    assert metrics.ttft_s is None  # but not a token
    assert metrics.output_tokens == 0
    # include_usage was asked for and ignored: no usage chunk.
    assert EventKind.USAGE not in kinds(timeline)


def test_a_ping_comment_is_kept_but_is_no_token() -> None:
    timeline = record(PING, split=len(PING) // 3)
    assert kinds(timeline) == [C, C, K, C]
    assert timeline.outcome is Outcome.TRUNCATED  # a slice of a stream: no end
    metrics = stream_metrics(timeline)
    assert metrics.chunks == 3
    assert metrics.gaps == 2  # the ping ends no gap


def test_a_usage_chunk_as_other_engines_send_it_gives_the_count() -> None:
    # llama-cpp-python sends none; vLLM and llama.cpp's own llama-server send one with empty
    # choices before [DONE] when asked (stream_options.include_usage).
    usage = (
        b'data: {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",'
        b' "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6,'
        b' "total_tokens": 11}}\n\n'
    )
    at = COMPLETIONS.index(b"data: [DONE]")
    timeline = record(COMPLETIONS[:at] + usage + COMPLETIONS[at:])
    assert kinds(timeline) == [C] * 6 + [N, EventKind.USAGE]
    assert timeline.token_source is TokenSource.USAGE_ONE_PER_EVENT
    assert stream_metrics(timeline).output_tokens == 6
