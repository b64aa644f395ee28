"""StreamRecorder and timeline_from_sse: live reads of OpenAI-compatible streams to timelines."""

from __future__ import annotations

import bisect

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadystream import EventKind, Outcome, Timeline, TokenSource, Where
from steadystream.protocol import (
    DONE,
    StreamRecorder,
    chat_chunk,
    completion_chunk,
    encode_chunk,
    encode_comment,
    encode_event,
    error_payload,
    timeline_from_sse,
)
from tests.support.sse import chat_body, cut

R, C, T, F, U, K, E, N = (
    EventKind.ROLE,
    EventKind.CONTENT,
    EventKind.REASONING,
    EventKind.TOOL_CALL,
    EventKind.USAGE,
    EventKind.KEEPALIVE,
    EventKind.ERROR,
    EventKind.EMPTY,
)


def kinds(timeline: Timeline) -> list[EventKind]:
    return [EventKind(int(k)) for k in timeline.kinds]


def one_read_each(*parts: bytes, start: int = 100, step: int = 10) -> list[tuple[int, bytes]]:
    return [(start + i * step, part) for i, part in enumerate(parts)]


def chunk(content: str) -> bytes:
    return encode_chunk(chat_chunk("c1", "m", 1, content=content))


ROLE = encode_chunk(chat_chunk("c1", "m", 1, role="assistant", content=""))
FINISH = encode_chunk(chat_chunk("c1", "m", 1, content="", finish_reason="stop"))


# -- a whole stream -----------------------------------------------------------------------------


def test_a_complete_chat_stream() -> None:
    recorder = StreamRecorder(
        "s1", Where.CLIENT, keep_text=True, labels={"model": "m"}, started_at=1.7e9, sent_ns=1_000
    )
    recorder.headers(1_050)
    body = chat_body(["Hel", "lo", "!"], usage_total=3)
    for i, read in enumerate(cut(body, [len(ROLE), len(ROLE) + 10])):
        recorder.feed(1_100 + 100 * i, read)
    timeline = recorder.finish(1_500)

    assert kinds(timeline) == [R, C, C, C, N, U]
    assert timeline.times.tolist() == [100, 300, 300, 300, 300, 300]
    assert timeline.tokens.tolist() == [0, 1, 1, 1, 0, 0]
    assert timeline.token_source is TokenSource.USAGE_ONE_PER_EVENT
    assert (timeline.header_ns, timeline.first_byte_ns, timeline.end_ns) == (50, 100, 300)
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.error is None
    assert timeline.text == "Hello!"
    assert timeline.texts is not None
    assert timeline.text_bytes.tolist() == [0, 3, 2, 1, 0, 0]
    assert timeline.usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert (timeline.stream_id, timeline.where, timeline.labels, timeline.started_at) == (
        "s1",
        Where.CLIENT,
        {"model": "m"},
        1.7e9,
    )
    # Every byte is some event's, except the [DONE] marker, which is not an event.
    assert int(timeline.wire_bytes.sum()) == len(body) - len(DONE)


def test_text_is_not_kept_unless_asked() -> None:
    timeline = timeline_from_sse(one_read_each(chat_body(["a", "b"])), stream_id="s")
    assert timeline.texts is None
    assert timeline.text_bytes.tolist() == [0, 1, 1, 0]


def test_timeline_from_sse_takes_the_vantage_point_and_header_time() -> None:
    reads = one_read_each(ROLE, chunk("x"), DONE)
    ours = timeline_from_sse(reads, stream_id="s", where="gateway-upstream", header_ns=90)
    assert ours.where is Where.GATEWAY_UPSTREAM
    assert ours.header_ns == 90


def test_crlf_framing_records_the_same_events() -> None:
    body = chat_body(["a", "bc"], usage_total=2)
    lf = timeline_from_sse(one_read_each(body), stream_id="s")
    crlf = timeline_from_sse(one_read_each(body.replace(b"\n", b"\r\n")), stream_id="s")
    assert kinds(crlf) == kinds(lf)
    assert crlf.tokens.tolist() == lf.tokens.tolist()
    assert crlf.outcome is Outcome.COMPLETE
    # Each line end is one byte longer; [DONE]'s are not in any event.
    extra = body.count(b"\n") - DONE.count(b"\n")
    assert int(crlf.wire_bytes.sum()) == int(lf.wire_bytes.sum()) + extra


# -- timing -------------------------------------------------------------------------------------


def test_each_event_takes_the_time_of_the_read_that_completed_it() -> None:
    first, second = chunk("a"), chunk("b")
    reads = [
        (10, first[:20]),
        (20, first[20:-1]),
        (30, first[-1:] + second[:5]),
        (40, second[5:]),
        (50, DONE),
    ]
    timeline = timeline_from_sse(reads, stream_id="s")
    assert timeline.times.tolist() == [30, 40]
    assert timeline.first_byte_ns == 10
    assert timeline.end_ns == 50


def test_empty_reads_do_not_count_as_bytes() -> None:
    recorder = StreamRecorder("s", "client")
    assert recorder.feed(5, b"") == []
    recorder.feed(7, chunk("a"))
    assert recorder.finish(9).first_byte_ns == 7


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 2000), max_size=15))
def test_any_split_stamps_events_with_their_last_byte(cuts: list[int]) -> None:
    body = chat_body(["One", " two", " three", "\n", " four"], usage_total=5)
    reads = cut(body, cuts)
    ends = np.cumsum([len(r) for r in reads]).tolist()
    timeline = timeline_from_sse(list(enumerate(reads)), stream_id="s")
    event_ends = np.cumsum(timeline.wire_bytes).tolist()
    # The read holding an event's last byte is the first read whose end reaches it.
    assert timeline.times.tolist() == [bisect.bisect_left(ends, end) for end in event_ends]
    assert kinds(timeline) == [R, C, C, C, C, C, N, U]
    assert timeline.tokens.tolist() == [0, 1, 1, 1, 1, 1, 0, 0]
    assert timeline.outcome is Outcome.COMPLETE


def test_sent_ns_is_subtracted_from_every_time() -> None:
    timeline = timeline_from_sse(
        [(5_010, ROLE), (5_020, chunk("a")), (5_030, DONE)],
        stream_id="s",
        header_ns=5_005,
        sent_ns=5_000,
    )
    assert timeline.times.tolist() == [10, 20]
    assert (timeline.header_ns, timeline.first_byte_ns, timeline.end_ns) == (5, 10, 30)


# -- how streams end ----------------------------------------------------------------------------


@pytest.mark.parametrize("tail", [b"data: [DONE]", b"data: [DONE]\n", b"data:[DONE]\r\n"])
def test_done_without_its_blank_line_still_completes(tail: bytes) -> None:
    reads = one_read_each(ROLE, chunk("a"), tail)
    timeline = timeline_from_sse([*reads, (500, b"")], stream_id="s")
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.error is None
    assert timeline.end_ns == 120  # the read that brought [DONE], not the close


def test_a_finish_reason_without_done_is_complete_and_ends_at_close() -> None:
    timeline = timeline_from_sse(one_read_each(ROLE, chunk("a"), FINISH, b""), stream_id="s")
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.end_ns == 130


def test_a_stream_that_just_stops_is_truncated() -> None:
    timeline = timeline_from_sse(one_read_each(ROLE, chunk("a")), stream_id="s")
    assert timeline.outcome is Outcome.TRUNCATED
    assert timeline.error == "stream ended without [DONE] or a finish reason"
    assert kinds(timeline) == [R, C]


def test_a_stream_cut_mid_event_says_so() -> None:
    partial = chunk("b")[:-5]
    timeline = timeline_from_sse(one_read_each(ROLE, chunk("a"), partial), stream_id="s")
    assert timeline.outcome is Outcome.TRUNCATED
    assert timeline.error is not None
    assert f"cut mid-event ({len(partial)} bytes undispatched)" in timeline.error
    assert len(timeline) == 2


def test_the_caller_says_how_it_ended() -> None:
    recorder = StreamRecorder("s", "client")
    recorder.feed(10, ROLE + chunk("a"))
    timeline = recorder.finish(20, outcome=Outcome.CANCELLED)
    assert timeline.outcome is Outcome.CANCELLED
    assert timeline.error is None
    assert timeline.end_ns == 20
    recorder = StreamRecorder("s", "client")
    recorder.feed(10, chunk("a"))
    timeline = recorder.finish(20, outcome="client-stuck", error="client stopped reading")
    assert (timeline.outcome, timeline.error) == (Outcome.CLIENT_STUCK, "client stopped reading")


def test_an_error_event_mid_stream() -> None:
    error = encode_event(orjson.dumps(error_payload("engine died")), event="error")
    recorder = StreamRecorder("s", "client")
    recorder.feed(10, ROLE + chunk("a"))
    assert not recorder.ended
    items = recorder.feed(20, error + chunk("late") + DONE)
    assert len(items) == 3  # still decoded and returned, for a gateway to forward
    assert recorder.ended
    timeline = recorder.finish(30)
    assert kinds(timeline) == [R, C, E]
    assert (timeline.outcome, timeline.error, timeline.end_ns) == (
        Outcome.ERROR,
        "engine died",
        20,
    )


def test_an_error_payload_in_a_data_event() -> None:
    reads = one_read_each(ROLE, chunk("a"), encode_chunk(error_payload("overloaded")), DONE)
    timeline = timeline_from_sse(reads, stream_id="s")
    assert kinds(timeline) == [R, C, E]
    assert (timeline.outcome, timeline.error) == (Outcome.ERROR, "overloaded")


def test_malformed_json_ends_the_stream_as_an_error_keeping_earlier_events() -> None:
    reads = one_read_each(ROLE, chunk("a"), b'data: {"choices": [\n\n', chunk("b"), DONE)
    timeline = timeline_from_sse(reads, stream_id="s", keep_text=True)
    assert kinds(timeline) == [R, C, E]
    assert timeline.text == "a"
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error is not None
    assert timeline.error.startswith("chunk is not valid JSON")
    assert timeline.end_ns == 120
    assert timeline.tokens.tolist() == [0, 1, 0]


def test_nothing_is_recorded_after_done() -> None:
    timeline = timeline_from_sse(one_read_each(chunk("a"), DONE, chunk("b")), stream_id="s")
    assert kinds(timeline) == [C]
    assert timeline.end_ns == 110


def test_recorder_misuse_is_an_error() -> None:
    recorder = StreamRecorder("s", "client")
    recorder.finish(0)
    with pytest.raises(RuntimeError, match="after finish"):
        recorder.feed(1, DONE)
    with pytest.raises(RuntimeError, match="already"):
        recorder.finish(1)


# -- kinds of events ----------------------------------------------------------------------------


def test_keepalives_and_unknown_named_events_are_keepalive_events() -> None:
    ping = encode_event("{}", event="ping")
    empty = b"data:\n\n"
    reads = one_read_each(ROLE, encode_comment("keep-alive"), ping, empty, chunk("a"), DONE)
    timeline = timeline_from_sse(reads, stream_id="s")
    assert kinds(timeline) == [R, K, K, K, C]
    assert timeline.tokens.tolist() == [0, 0, 0, 0, 1]
    assert timeline.wire_bytes.tolist()[1:4] == [
        len(b": keep-alive\n"),
        1 + len(ping),
        len(empty),
    ]


def test_completions_shape_stream() -> None:
    parts = [encode_chunk(completion_chunk("x", "m", 1, text=t)) for t in ["The", " sky"]]
    done = encode_chunk(completion_chunk("x", "m", 1, text="", finish_reason="length"))
    timeline = timeline_from_sse(one_read_each(*parts, done, DONE), stream_id="s")
    assert kinds(timeline) == [C, C, N]
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.token_source is TokenSource.ESTIMATED


def test_reasoning_then_tool_call_deltas() -> None:
    tool = {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "lookup", "arguments": ""},
    }
    args = {"index": 0, "function": {"arguments": '{"q": 1}'}}
    bodies = [
        encode_chunk(chat_chunk("c", "m", 1, role="assistant", content="")),
        encode_chunk(chat_chunk("c", "m", 1, reasoning="think")),
        encode_chunk({"choices": [{"index": 0, "delta": {"tool_calls": [tool]}}]}),
        encode_chunk({"choices": [{"index": 0, "delta": {"tool_calls": [args]}}]}),
        encode_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        DONE,
    ]
    timeline = timeline_from_sse(one_read_each(*bodies), stream_id="s", keep_text=True)
    assert kinds(timeline) == [R, T, F, F, N]
    assert timeline.texts == ["", "think", "lookup", '{"q": 1}', ""]
    assert timeline.text_mask.tolist() == [False, True, True, True, False]


# -- token counts -------------------------------------------------------------------------------


def test_per_chunk_usage_gives_exact_multi_token_counts() -> None:
    running = [2, 5, 6]
    body = chat_body(["ab", "cde", "f"], running_usage=running, usage_total=7)
    timeline = timeline_from_sse(one_read_each(body), stream_id="s")
    assert timeline.token_source is TokenSource.EXACT
    # The finish chunk has no usage here; the tail's total holds the one token it made.
    assert timeline.tokens.tolist() == [0, 2, 3, 1, 0, 1]
    assert timeline.total_tokens == 6


@pytest.mark.parametrize("running", [[3, 2], [2, 2]], ids=["goes back", "stands still"])
def test_a_running_count_that_does_not_grow_per_chunk_is_not_trusted(running: list[int]) -> None:
    body = chat_body(["ab", "cd"], running_usage=running, usage_total=4)
    timeline = timeline_from_sse(one_read_each(body), stream_id="s")
    assert timeline.token_source is TokenSource.USAGE_PROPORTIONAL
    assert timeline.total_tokens == 4


def test_a_final_total_other_than_the_event_count_is_spread() -> None:
    body = chat_body(["a", "bbbbbbb"], usage_total=10)
    timeline = timeline_from_sse(one_read_each(body), stream_id="s")
    assert timeline.token_source is TokenSource.USAGE_PROPORTIONAL
    assert timeline.tokens.tolist() == [0, 2, 8, 0, 0]


def test_no_usage_at_all_is_estimated_from_the_text() -> None:
    body = chat_body(["Hello there", " my good friend"])
    timeline = timeline_from_sse(one_read_each(body), stream_id="s")
    assert timeline.token_source is TokenSource.ESTIMATED
    assert timeline.tokens.tolist() == [0, 3, 4, 0]


def completion_body(pieces: list[str], finish: str) -> bytes:
    """A llama.cpp-style completions stream: one chunk per token, no usage, then the finish."""
    out = [encode_chunk(completion_chunk("c1", "m", 1, text=piece)) for piece in pieces]
    out.append(encode_chunk(completion_chunk("c1", "m", 1, text="", finish_reason=finish)))
    return b"".join(out) + DONE


def test_a_stream_that_stops_for_length_without_usage_made_max_tokens() -> None:
    # llama-cpp-python, --max-tokens 64: 64 one-token chunks, no usage. Estimating gave
    # about 1.5 tokens a chunk; the request's limit says exactly one each.
    pieces = [" lighthouse", "s", " guide", " ships", " at", " night"] * 10 + [" and"] * 4
    body = completion_body(pieces, "length")
    timeline = timeline_from_sse(one_read_each(body), stream_id="s", max_tokens=64)
    assert timeline.token_source is TokenSource.MAX_TOKENS
    assert timeline.total_tokens == 64
    assert timeline.tokens[timeline.text_mask].tolist() == [1] * 64
    # Stopped on its own, or with no limit known: the text is all there is to go by.
    stopped = timeline_from_sse(
        one_read_each(completion_body(pieces, "stop")), stream_id="s", max_tokens=64
    )
    assert stopped.token_source is TokenSource.ESTIMATED
    unknown = timeline_from_sse(one_read_each(body), stream_id="s")
    assert unknown.token_source is TokenSource.ESTIMATED


def test_pieces_of_tokens_keep_the_usage_total() -> None:
    body = chat_body(["Hel", "lo", " wor", "ld", "!"], usage_total=3)
    timeline = timeline_from_sse(one_read_each(body), stream_id="s")
    assert timeline.token_source is TokenSource.USAGE_SHARED
    assert timeline.total_tokens == 3
    assert int(timeline.text_mask.sum()) == 5  # every piece the user saw is a text event
