"""The Responses and Messages dialects: what each event is to the timeline, and bad input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from steadystream import EventKind, Outcome, ProtocolError, Timeline
from steadystream.protocol import SseComment, SseEvent, timeline_from_sse
from steadystream.protocol.apis import api_of_path, new_dialect
from steadystream.protocol.messages import MessagesDialect
from steadystream.protocol.responses import ResponsesDialect

MS = 1_000_000


def event(kind: str, named: bool = True, **fields: Any) -> bytes:
    data = orjson.dumps({"type": kind, **fields}).decode()
    return (f"event: {kind}\n" if named else "").encode() + f"data: {data}\n\n".encode()


def responses_stream(
    texts: list[str], *, reasoning: Sequence[str] = (), usage: bool = True
) -> list[bytes]:
    seq = iter(range(1000))
    out = [
        event(
            "response.created",
            sequence_number=next(seq),
            response={"id": "resp_1", "created_at": 1, "model": "m", "status": "in_progress"},
        ),
        event("response.in_progress", sequence_number=next(seq), response={"id": "resp_1"}),
        event(
            "response.output_item.added",
            sequence_number=next(seq),
            output_index=0,
            item={"type": "message"},
        ),
    ]
    out += [
        event("response.reasoning_text.delta", sequence_number=next(seq), delta=t)
        for t in reasoning
    ]
    out += [event("response.output_text.delta", sequence_number=next(seq), delta=t) for t in texts]
    out.append(event("response.output_text.done", sequence_number=next(seq), text="".join(texts)))
    final = {"id": "resp_1", "status": "completed"}
    if usage:
        final["usage"] = {
            "input_tokens": 7,
            "output_tokens": len(texts) + len(reasoning),
            "total_tokens": 7 + len(texts) + len(reasoning),
            "output_tokens_details": {"reasoning_tokens": len(reasoning)},
        }
    out.append(event("response.completed", sequence_number=next(seq), response=final))
    return out


def messages_stream(
    texts: list[str], *, thinking: Sequence[str] = (), stop: str = "end_turn"
) -> list[bytes]:
    out = [
        event(
            "message_start",
            message={
                "id": "msg_1",
                "model": "claude",
                "usage": {"input_tokens": 9, "cache_read_input_tokens": 3, "output_tokens": 1},
            },
        ),
        event("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        event("ping"),
    ]
    out += [
        event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": t})
        for t in thinking
    ]
    out.append(
        event(
            "content_block_delta", index=0, delta={"type": "signature_delta", "signature": "c2ln"}
        )
    )
    out += [
        event("content_block_delta", index=1, delta={"type": "text_delta", "text": t})
        for t in texts
    ]
    out.append(event("content_block_stop", index=1))
    out.append(
        event(
            "message_delta",
            delta={"stop_reason": stop, "stop_sequence": None},
            usage={"output_tokens": len(texts) + len(thinking)},
        )
    )
    out.append(event("message_stop"))
    return out


def record(pieces: list[bytes], api: str, **kwargs: Any) -> Timeline:
    reads = [(i * 10 * MS, piece) for i, piece in enumerate(pieces, start=1)]
    return timeline_from_sse(
        reads, stream_id="s", keep_text=True, dialect=new_dialect(api), **kwargs
    )


def test_a_responses_stream_is_its_text_reasoning_and_final_usage() -> None:
    pieces = responses_stream(["Hel", "lo"], reasoning=["hm"])
    timeline = record(pieces, "responses")
    assert timeline.outcome is Outcome.COMPLETE
    kinds = [EventKind(k) for k in timeline.kinds]
    assert kinds.count(EventKind.CONTENT) == 2
    assert kinds.count(EventKind.REASONING) == 1
    assert kinds[0] is EventKind.ROLE  # response.created: the answer began, not a token
    assert (
        "".join(
            t for t, k in zip(timeline.texts or [], kinds, strict=True) if k is EventKind.CONTENT
        )
        == "Hello"
    )
    assert timeline.usage == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "reasoning_tokens": 1,
    }
    assert int(timeline.tokens.sum()) == 3
    assert (
        timeline.end_ns == len(pieces) * 10 * MS
    )  # the final response ends it: no [DONE] in this API


def test_a_responses_stream_cut_for_length_is_complete_with_length() -> None:
    pieces = responses_stream(["a"])
    pieces[-1] = event(
        "response.incomplete",
        sequence_number=9,
        response={
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"output_tokens": 1},
        },
    )
    dialect = ResponsesDialect()
    from steadystream.protocol import new_decoder

    decoded = [dialect.decode(item) for piece in pieces for item in new_decoder().feed(piece)]
    assert decoded[-1].kind is None
    assert decoded[-1].finish == "length"
    assert dialect.last_sequence_number == 9
    assert dialect.envelope == {"id": "resp_1", "created_at": 1, "model": "m"}


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        (
            [event("error", code="server_error", message="boom", sequence_number=4)],
            "server_error: boom",
        ),
        (
            [
                event(
                    "response.failed",
                    response={"error": {"code": "rate_limit_exceeded", "message": "slow down"}},
                )
            ],
            "rate_limit_exceeded: slow down",
        ),
        ([b"event: error\ndata: upstream fell over\n\n"], "upstream fell over"),
    ],
)
def test_responses_errors_end_the_stream_as_errors(pieces: list[bytes], message: str) -> None:
    timeline = record(
        responses_stream(["a"])[:3] + pieces + responses_stream(["never"])[3:], "responses"
    )
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error == message
    assert "never" not in "".join(timeline.texts or [])


def test_a_messages_stream_is_its_text_thinking_and_usage() -> None:
    timeline = record(messages_stream(["Hi", " there"], thinking=["let", " me"]), "messages")
    assert timeline.outcome is Outcome.COMPLETE
    kinds = [EventKind(k) for k in timeline.kinds]
    assert kinds.count(EventKind.CONTENT) == 2
    assert kinds.count(EventKind.REASONING) == 2
    assert EventKind.TOOL_CALL not in kinds
    # ping, block starts and stops, the signature: recorded, never tokens
    assert kinds.count(EventKind.KEEPALIVE) == 4
    assert timeline.usage == {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}
    assert int(timeline.tokens.sum()) == 4


def test_messages_stop_reasons_read_as_chats_finish_reasons() -> None:
    dialect = MessagesDialect()
    from steadystream.protocol import new_decoder

    items = new_decoder().feed(b"".join(messages_stream(["a"], stop="max_tokens")))
    finishes = [d.finish for d in map(dialect.decode, items) if d.finish is not None]
    assert finishes == ["length"]
    assert dialect.envelope == {"id": "msg_1", "model": "claude"}


def test_a_tool_calls_arguments_are_tool_call_text() -> None:
    pieces = messages_stream([])
    pieces.insert(
        3,
        event(
            "content_block_delta",
            index=0,
            delta={"type": "input_json_delta", "partial_json": '{"city": '},
        ),
    )
    timeline = record(pieces, "messages")
    assert EventKind.TOOL_CALL in [EventKind(k) for k in timeline.kinds]
    resp = responses_stream([])
    resp.insert(3, event("response.function_call_arguments.delta", sequence_number=3, delta='{"a"'))
    assert EventKind.TOOL_CALL in [EventKind(k) for k in record(resp, "responses").kinds]


def test_an_overloaded_error_mid_stream_is_the_streams_error() -> None:
    pieces = messages_stream(["a", "b"])
    pieces.insert(4, event("error", error={"type": "overloaded_error", "message": "Overloaded"}))
    timeline = record(pieces, "messages")
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error == "overloaded_error: Overloaded"


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_an_error_in_many_lines_is_recorded_as_one(api: str) -> None:
    # (Its line breaks would forge lines in a log that quotes it.)
    message = "line1\nline2\x1b[31m\r\nline3"
    if api == "messages":
        pieces = messages_stream(["a"])
        pieces.insert(4, event("error", error={"type": "api_error", "message": message}))
    else:
        pieces = responses_stream(["a"])
        pieces.insert(3, event("error", sequence_number=3, code="api_error", message=message))
    assert record(pieces, api).error == "api_error: line1 line2 [31m line3"


def test_frames_without_event_lines_are_read_by_their_type() -> None:
    named = record(messages_stream(["x", "y"]), "messages")
    bare = [piece.split(b"\n", 1)[1] for piece in messages_stream(["x", "y"])]
    unnamed = record(bare, "messages")
    assert list(unnamed.kinds) == list(named.kinds)


@pytest.mark.parametrize("api", ["responses", "messages"])
@pytest.mark.parametrize(
    ("item", "says"),
    [
        (SseEvent("not json"), "not valid JSON"),
        (SseEvent("[1, 2]"), "must be a JSON object, got a list"),
        (SseEvent('{"delta": "x"}'), "has no type"),
        (SseEvent('{"type": "ping"}', event="message_stop"), "carries data of type 'ping'"),
    ],
)
def test_bad_events_are_protocol_errors_naming_the_fault(
    api: str, item: SseEvent, says: str
) -> None:
    with pytest.raises(ProtocolError, match=says):
        new_dialect(api).decode(item)


def test_text_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ProtocolError, match="delta is a number"):
        ResponsesDialect().decode(SseEvent('{"type": "response.output_text.delta", "delta": 3}'))
    with pytest.raises(ProtocolError, match="text is null"):
        MessagesDialect().decode(
            SseEvent(
                '{"type": "content_block_delta", "delta": {"type": "text_delta", "text": null}}'
            )
        )


def test_comments_empty_events_and_unknown_events_are_keepalives() -> None:
    for dialect in (ResponsesDialect(), MessagesDialect()):
        for item in (SseComment("hi"), SseEvent(""), SseEvent('{"type": "something.new"}')):
            assert dialect.decode(item).kind is EventKind.KEEPALIVE


def test_an_endless_error_message_is_cut() -> None:
    huge = "x" * 1_000_000
    decoded = MessagesDialect().decode(
        SseEvent(orjson.dumps({"type": "error", "error": {"type": "e", "message": huge}}).decode())
    )
    assert decoded.kind is EventKind.ERROR
    assert decoded.error is not None
    assert len(decoded.error) <= 2_000


def test_paths_name_their_api() -> None:
    assert api_of_path("/v1/chat/completions") == "chat"
    assert api_of_path("/v1/completions") == "completions"
    assert api_of_path("/v1/responses") == "responses"
    assert api_of_path("/v1/messages") == "messages"
    assert api_of_path("/v1/embeddings") is None
    with pytest.raises(ValueError, match="unknown API 'soap'"):
        new_dialect("soap")


def test_hostile_values_are_read_without_a_crash() -> None:
    """Found by an adversarial review: each of these raised (TypeError, OverflowError) or
    numbered the gateway's own events past what JSON holds."""
    odd_delta = SseEvent('{"type": "content_block_delta", "delta": {"type": []}}')
    assert MessagesDialect().decode(odd_delta).kind is EventKind.KEEPALIVE
    huge = 2**64 - 1
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    decoded = MessagesDialect().decode(
        SseEvent(orjson.dumps(delta | {"usage": {"output_tokens": huge}}).decode())
    )
    assert decoded.usage_counts is None  # no count a timeline can hold
    assert decoded.usage == -1
    dialect = ResponsesDialect()
    dialect.decode(SseEvent('{"type": "response.in_progress", "sequence_number": 4}'))
    dialect.decode(SseEvent(f'{{"type": "response.in_progress", "sequence_number": {huge}}}'))
    with pytest.raises(ProtocolError):
        dialect.decode(
            SseEvent('{"type": "response.output_text.delta", "delta": 1, "sequence_number": 5}')
        )
    assert dialect.last_sequence_number == 4  # neither the huge one nor the refused one


@pytest.mark.parametrize(
    ("api", "end"),
    [("messages", "message_stop"), ("responses", "response.completed (or response.incomplete)")],
)
def test_a_stream_cut_before_its_end_names_its_dialects_end(api: str, end: str) -> None:
    # (Not "[DONE]": these APIs send none.)
    whole = messages_stream(["a", "b"]) if api == "messages" else responses_stream(["a", "b"])
    timeline = record(whole[:5], api)
    assert timeline.outcome is Outcome.TRUNCATED
    assert timeline.error == f"stream ended without {end}"


@pytest.mark.parametrize(
    ("response", "error"),
    [
        ({"status": "failed"}, "the response failed (response.failed, no message)"),
        (
            {"error": {"code": "server_error"}},
            "server_error: the response failed (response.failed, no message)",
        ),
        (
            {"error": {"code": "rate_limit_exceeded", "message": "slow"}},
            "rate_limit_exceeded: slow",
        ),
    ],
)
def test_a_failed_response_says_what_it_can(response: dict[str, Any], error: str) -> None:
    pieces = responses_stream(["a"])
    pieces.insert(3, event("response.failed", sequence_number=3, response=response))
    assert record(pieces, "responses").error == error
