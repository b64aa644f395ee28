"""Upstream bytes as events: cut at boundaries, bytes untouched, fallback rewriting."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import steadystream.gateway._line_py as _line_py
from steadystream import EventKind
from steadystream._build import builds
from steadystream.gateway.events import ChunkFormat, FallbackRewriter, Piece
from steadystream.gateway.failover import Cause, PrefixMatcher
from steadystream.gateway.line import EventCutter
from steadystream.protocol import DONE, SseDecoder, chat_chunk, encode_chunk, parse_chunk
from steadystream.protocol.apis import new_dialect
from steadystream.protocol.chunks import usage_chunk
from tests.support.sse import cut


def chat_stream(texts: list[str], *, id: str = "c1", model: str = "m") -> bytes:
    body = encode_chunk(chat_chunk(id, model, 1, role="assistant", content=""))
    body += b"".join(encode_chunk(chat_chunk(id, model, 1, content=t)) for t in texts)
    body += encode_chunk(chat_chunk(id, model, 1, finish_reason="stop"))
    return body + DONE


BODY = b": ping\n\n" + chat_stream(["Hel", "lo", " wor", "ld"])


def feed_all(reads: list[bytes]) -> tuple[bytes, list[Piece], bool]:
    cutter = EventCutter()
    forwarded = b""
    pieces: list[Piece] = []
    done = False
    for read in reads:
        result = cutter.feed(read)
        assert result.failure is None
        forwarded += result.data
        pieces += result.pieces
        assert b"".join(p.raw for p in result.pieces) == result.data
        done = done or result.done
    return forwarded, pieces, done


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=12))
def test_bytes_go_out_unchanged_and_only_whole_events(cuts: list[int]) -> None:
    reads = cut(BODY, cuts)
    forwarded = b""
    cutter = EventCutter()
    for read in reads:
        result = cutter.feed(read)
        forwarded += result.data
        # Whatever has gone out so far decodes to whole events: nothing is left mid-event.
        decoder = SseDecoder()
        decoder.feed(forwarded)
        assert not decoder.in_event
    assert forwarded == BODY


def test_what_each_event_is() -> None:
    _forwarded, pieces, done = feed_all([BODY])
    assert done
    kinds = [p.kind for p in pieces]
    assert kinds == [
        EventKind.KEEPALIVE,
        EventKind.ROLE,
        *[EventKind.CONTENT] * 4,
        EventKind.EMPTY,
        None,  # [DONE]
    ]
    assert "".join(p.text for p in pieces) == "Hello world"
    assert pieces[-2].finish == "stop"
    assert sum(p.wire for p in pieces) == len(BODY)


def test_an_error_event_is_not_forwarded_and_ends_the_attempt() -> None:
    error = b'data: {"error": {"message": "engine died"}}\n\n'
    body = chat_stream(["a", "b"])[: -len(DONE)]
    cutter = EventCutter()
    result = cutter.feed(body[:200] + b"")
    rest = cutter.feed(body[200:] + error + DONE)
    assert result.failure is None
    assert rest.failure is not None
    assert rest.failure.cause is Cause.UPSTREAM_ERROR
    assert rest.failure.message == "engine died"
    assert (result.data + rest.data) == body  # everything before the error, nothing of it
    assert not rest.done


def test_a_payload_that_is_not_a_chunk_is_a_failure() -> None:
    result = EventCutter().feed(b"data: {not json\n\n")
    assert result.failure is not None
    assert result.failure.cause is Cause.BAD_PAYLOAD
    assert result.data == b""


def test_why_a_body_ended_early() -> None:
    cutter = EventCutter()
    cutter.feed(b'data: {"choi')
    assert "mid-event" in cutter.error_at_end()
    assert "without [DONE]" in EventCutter().error_at_end()


@pytest.mark.parametrize(
    ("api", "end"), [("messages", "message_stop"), ("responses", "response.completed")]
)
def test_a_typed_stream_that_ended_early_names_its_own_end(api: str, end: str) -> None:
    # (These APIs send no [DONE]: the client would be told of an end it never sees.)
    error = EventCutter(dialect=new_dialect(api)).error_at_end()
    assert error.startswith(f"the upstream stream ended without {end}")


def test_the_first_chunk_gives_the_envelope() -> None:
    cutter = EventCutter()
    cutter.feed(chat_stream(["x"], id="chatcmpl-9", model="big"))
    assert cutter.envelope == {"id": "chatcmpl-9", "created": 1, "model": "big"}


def fallback_pieces(texts: list[str]) -> list[Piece]:
    _, pieces, _ = feed_all([chat_stream(texts, id="other", model="fallback")])
    return pieces


def relayed(rewriter: FallbackRewriter, pieces: list[Piece]) -> list[Piece]:
    out = []
    for piece in pieces:
        rewritten = rewriter.rewrite(piece)
        if rewritten is not None:
            out.append(rewritten)
    return out


def test_a_continuation_keeps_the_stream_identity_and_drops_a_second_role() -> None:
    envelope = {"id": "first", "created": 7, "model": "m"}
    rewriter = FallbackRewriter(envelope, role_sent=True, matcher=None)
    out = relayed(rewriter, fallback_pieces([" more", " text"]))
    assert [p.kind for p in out] == [EventKind.CONTENT, EventKind.CONTENT, EventKind.EMPTY, None]
    for piece in out[:-1]:
        payload = orjson.loads(piece.raw.removeprefix(b"data: "))
        assert (payload["id"], payload["created"], payload["model"]) == ("first", 7, "m")
    assert "".join(p.text for p in out) == " more text"


def test_regenerate_relays_only_what_follows_the_delivered_prefix() -> None:
    rewriter = FallbackRewriter({"id": "first"}, role_sent=True, matcher=PrefixMatcher("Hello wo"))
    out = relayed(rewriter, fallback_pieces(["Hel", "lo", " wor", "ld", "!"]))
    assert not rewriter.diverged
    texts = [parse_chunk(p.raw.removeprefix(b"data: ").strip()).text for p in out[:-1]]
    assert "".join(texts) == "rld!"
    assert out[-1].kind is None


def test_regenerate_diverging_or_shorter_is_caught() -> None:
    diverging = FallbackRewriter(None, role_sent=True, matcher=PrefixMatcher("Hello"))
    assert relayed(diverging, fallback_pieces(["Help", " me"])) == []
    assert diverging.diverged
    shorter = FallbackRewriter(None, role_sent=True, matcher=PrefixMatcher("Hello world"))
    relayed(shorter, fallback_pieces(["Hello"]))
    assert shorter.diverged


def test_the_gateways_own_events() -> None:
    chunks = ChunkFormat(chat=True, envelope={"id": "x", "model": "m", "created": 3})
    first = orjson.loads(chunks.text(EventKind.CONTENT, "Hi").removeprefix(b"data: "))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}
    second = orjson.loads(chunks.text(EventKind.REASONING, "hm").removeprefix(b"data: "))
    assert second["choices"][0]["delta"] == {"reasoning_content": "hm"}
    error = ChunkFormat.error("upstream died", "upstream_reset")
    assert error.endswith(DONE)
    assert parse_chunk(error.split(b"\n\n")[0].removeprefix(b"data: ")).error == "upstream died"
    completion = ChunkFormat(chat=False, envelope={"id": "x"})
    assert (
        parse_chunk(completion.text(EventKind.CONTENT, "ok").removeprefix(b"data: ")).text == "ok"
    )


def test_without_text_keeps_the_finish_reason() -> None:
    payload = orjson.dumps(chat_chunk("x", "m", 1, content="end", finish_reason="length")).decode()
    piece = Piece(EventKind.CONTENT, "end", b"", 0, -1, "length", payload)
    rest = parse_chunk(ChunkFormat.without_text(piece).removeprefix(b"data: "))
    assert rest.text == ""
    assert rest.finish_reason == "length"


@pytest.mark.parametrize("split", [1, 7, 30])
def test_keepalive_comments_and_unknown_events_are_keepalives(split: int) -> None:
    body = b": hello\n\nevent: ping\ndata: x\n\n" + DONE
    _, pieces, done = feed_all(cut(body, [split]))
    assert [p.kind for p in pieces] == [EventKind.KEEPALIVE, EventKind.KEEPALIVE, None]
    assert done


def test_a_continuations_usage_describes_the_answer_the_client_received() -> None:
    # 8 tokens were committed by the first upstream; the fallback counted the prompt with
    # those 8 as an assistant prefix, and only its own 3 completion tokens.
    usage = encode_chunk(
        usage_chunk(
            "other", "fallback", 1, object_name="chat.completion.chunk",
            prompt_tokens=28, completion_tokens=3,
        )
    )  # fmt: skip
    _, pieces, _ = feed_all([chat_stream(["a", "b", "c"]).removesuffix(DONE) + usage + DONE])
    rewriter = FallbackRewriter({"id": "first"}, role_sent=True, matcher=None, usage_base=8)
    (tail,) = [p for p in relayed(rewriter, pieces) if p.kind is EventKind.USAGE]
    sent = orjson.loads(tail.raw.removeprefix(b"data: "))["usage"]
    assert (sent["prompt_tokens"], sent["completion_tokens"], sent["total_tokens"]) == (20, 11, 31)
    assert tail.usage_counts == sent
    # What the fallback billed is kept apart, unchanged.
    (billed,) = [p.usage_counts for p in pieces if p.kind is EventKind.USAGE]
    assert billed is not None
    assert billed["prompt_tokens"] == 28


def test_a_huge_event_in_small_reads_is_held_whole_then_cut() -> None:
    # 16 MiB in 4 KiB reads. That this costs linear time (re-copying the half event on every
    # read, as the old cutter did, moves 32 GiB) is measured by
    # benchmarks/bench_gateway_bounds.py; here, that every read is held until the end comes.
    cutter = EventCutter(max_event_bytes=64 << 20)
    start = b'data: {"pad": "'
    read = b"x" * 4096
    assert cutter.feed(start).pieces == []
    for n in range(1, 4097):
        assert cutter.feed(read).failure is None
        assert cutter.pending_bytes == len(start) + n * len(read)
    result = cutter.feed(b'"}\n\n')
    assert result.failure is not None  # it is no chunk, but it was cut whole
    assert result.failure.cause is Cause.BAD_PAYLOAD
    assert cutter.pending_bytes == 0


def test_an_event_past_max_event_bytes_fails_as_soon_as_it_passes() -> None:
    cutter = EventCutter(max_event_bytes=10_000)
    assert cutter.feed(b"data: " + b"y" * 9_000).failure is None
    result = cutter.feed(b"y" * 2_000)
    assert result.failure is not None
    assert result.failure.cause is Cause.OVERSIZED_EVENT
    assert "limits.max_event_bytes (10000 bytes)" in result.failure.message
    assert cutter.pending_bytes == 11_006  # still held: the stream's buffer peak shows it


def test_a_stream_past_max_stream_events_fails_after_the_read_that_passed_it(build: str) -> None:
    chunk = encode_chunk(chat_chunk("c", "m", 1, content="x"))
    cutter = EventCutter(max_stream_events=5)
    assert type(cutter).__module__.endswith("_c") is (build == "compiled")
    assert cutter.feed(chunk * 3).failure is None
    assert cutter.feed(chunk * 2).failure is None  # five: the bound itself is taken
    result = cutter.feed(chunk * 2)
    assert len(result.pieces) == 2  # relayed, then the stream ends
    assert result.failure is not None
    assert result.failure.cause is Cause.STREAM_TOO_LONG
    assert "limits.max_stream_events (5)" in result.failure.message


# -- the fast path: whole single-line data events cut without the SSE decoder -------------------


def _event(payload: bytes | dict[str, object]) -> bytes:
    data = orjson.dumps(payload) if isinstance(payload, dict) else payload
    return b"data: " + data + b"\n\n"


# Every shape the fast path must either read exactly as the general path does or hand back
# to it: chunks of each kind, errors, what is not a chunk, and SSE it does not take.
SHAPES = [
    encode_chunk(chat_chunk("c", "m", 1, content="tok")),
    encode_chunk(chat_chunk("c", "m", 1, content="é🙂 ")),
    encode_chunk(chat_chunk("c", "m", 1, role="assistant", content="")),
    encode_chunk(chat_chunk("c", "m", 1, role="assistant", content="hi")),
    encode_chunk(chat_chunk("c", "m", 1, reasoning="think")),
    encode_chunk(chat_chunk("c", "m", 1, content="", finish_reason="stop")),
    encode_chunk(chat_chunk("c", "m", 1, content="x", usage={"completion_tokens": 3})),
    encode_chunk(usage_chunk("c", "m", 1, object_name="x", prompt_tokens=2, completion_tokens=5)),
    _event({"choices": [{"index": 0, "text": "done", "finish_reason": None}]}),
    _event({"choices": [{"index": 0, "text": 7}]}),
    _event({"choices": [{"delta": {"content": "end"}, "finish_reason": "stop"}]}),
    _event({"choices": [{"delta": {"content": "a"}}, {"delta": {"content": "b"}}]}),
    _event({"choices": [{"delta": {"content": "a", "finish_reason": None, "x": 1}}]}),
    _event({"choices": [{"delta": {"content": None}}]}),
    _event({"choices": [{"delta": {"content": "c", "reasoning_content": "r"}}]}),
    _event({"choices": [{"delta": {"role": "assistant", "content": "c", "reasoning": "r"}}]}),
    _event({"choices": [{"delta": {"content": 5}}]}),
    _event({"choices": [{"delta": {"tool_calls": [{"function": {"name": "f"}}]}}]}),
    _event({"choices": [{"delta": "nope"}]}),
    _event({"choices": [{"index": 1, "delta": {}, "finish_reason": "length"}]}),
    _event({"error": {"message": "overloaded"}}),
    _event({"error": None, "choices": [{"delta": {"content": "e"}}]}),
    _event({"object": "error", "message": "old vllm"}),
    _event({"choices": "x"}),
    _event(b"[1, 2]"),
    _event(b"{not json"),
    _event(b'{"choices": [{"delta": {"content": "\xff"}}]}'),
    b'data:{"choices":[{"delta":{"content":"nospace"}}]}\n\n',
    b'data:  {"choices":[{"delta":{"content":"two spaces"}}]}\n\n',
    b"data: \n\n",
    b"data: [DONE] \n\n",
    b": ping\n\n",
    b"event: ping\ndata: {}\n\n",
    b'event: error\ndata: {"error": "named"}\n\n',
    b'id: 7\ndata: {"choices":[{"delta":{"content":"id"}}]}\n\n',
    b"retry: 10\n\n",
    b'data: {"choices":[{"delta":{"content":"cr"}}]}\r\n\r\n',
    b'data: {"choices":\ndata: [{"delta":{"content":"two lines"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"nl"}}]\n}\n\n',  # "}" is a line of its own
    b'data: {"choices":[{"delta":{"content":"cr"}}]}\r\n\n',
    b'data: {"choices":[{"delta":{"content":"cr"}}]}\r\r\n\n',
    b"\n",
    b"\xef\xbb\xbf" + encode_chunk(chat_chunk("c", "m", 1, content="bom")),
]
ENDS = [DONE, DONE + SHAPES[0], DONE + b": ping\n\n", DONE + b"id: 3\n", b""]


def _cutters(
    monkeypatch: pytest.MonkeyPatch, **kwargs: Any
) -> tuple[_line_py.EventCutter, _line_py.EventCutter]:
    """A cutter of each build, each on its own build's SSE cut and dialect."""
    python, compiled = builds(_line_py)
    assert compiled.__name__.endswith("_c"), "the compiled build is not here (make test builds it)"
    with monkeypatch.context() as context:
        context.setenv("STEADYSTREAM_NATIVE", "0")
        slow = python.EventCutter(**kwargs)
        context.setenv("STEADYSTREAM_NATIVE", "1")
        fast = compiled.EventCutter(**kwargs)
    return slow, fast


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(SHAPES), max_size=8),
    st.sampled_from(ENDS),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=6),
    st.booleans(),
    st.booleans(),
    st.sampled_from([1 << 20, 150]),
)
def test_the_compiled_build_cuts_every_stream_as_the_python_build_does(
    events: list[bytes],
    end: bytes,
    cuts: list[int],
    whole_reads: bool,
    keep_raw: bool,
    limit: int,
) -> None:
    body = b"".join(events) + end
    if whole_reads:  # reads that end at event ends: what servers send
        bounds = [0]
        for event in [*events, end]:
            bounds.append(bounds[-1] + len(event))
        cuts = [bounds[c % len(bounds)] for c in cuts]
    reads = cut(body, [c % (len(body) + 1) for c in cuts])
    with pytest.MonkeyPatch.context() as monkeypatch:
        python, compiled = _cutters(monkeypatch, keep_raw=keep_raw, max_event_bytes=limit)
    for read in reads:
        if not read:
            continue
        got, want = compiled.feed(read), python.feed(read)
        assert got == want
        assert compiled.pending_bytes == python.pending_bytes
        assert compiled.envelope == python.envelope
        if want.failure is not None or want.done:
            break
    else:
        assert compiled.error_at_end() == python.error_at_end()


def test_the_compiled_build_cuts_every_pair_of_shapes_as_the_python_build_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each pair of shapes, after an opening chunk, read event by event and as one read."""
    opening = encode_chunk(chat_chunk("c", "m", 1, role="assistant", content=""))
    for first, second, limit in itertools.product(SHAPES, SHAPES, [1 << 20, 150]):
        for reads in (
            [first, second, DONE],
            [first + second + DONE],
            [first, second + DONE + b": ping\n\n"],
        ):
            python, compiled = _cutters(monkeypatch, max_event_bytes=limit)
            assert compiled.feed(opening) == python.feed(opening)
            for read in reads:
                got, want = compiled.feed(read), python.feed(read)
                assert got == want, (first, second, read)
                assert compiled.pending_bytes == python.pending_bytes
                if want.failure is not None or want.done:
                    break
