"""The translation of chat into the Responses and Messages APIs, alone: chat bytes cut by the
line's event cutter, each piece through a translator, every event out validated against the
official SDKs' types; and the request bodies translated into chat."""

from __future__ import annotations

from typing import Any

import anthropic.types
import openai.types.responses
import orjson
import pytest
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter

from steadystream import EventKind
from steadystream.gateway.failover import Cause
from steadystream.gateway.line import line_build
from steadystream.gateway.requests import ApiError
from steadystream.gateway.translation import chat_request, stream_translator, whole_answer
from steadystream.protocol import new_decoder
from steadystream.protocol.chunks import chat_chunk, encode_chunk, usage_chunk
from steadystream.protocol.sse import DONE
from tests.support.translation import REQUEST, RESPONSES_EVENT, client_events, translate


def chunk(**delta: Any) -> bytes:
    return encode_chunk(chat_chunk("c1", "up", 7, **delta))


def usage(prompt: int, completion: int) -> bytes:
    return encode_chunk(
        usage_chunk(
            "c1",
            "up",
            7,
            object_name="chat.completion.chunk",
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
    )


def answer(*texts: str, finish: str = "stop", reasoning: tuple[str, ...] = ()) -> list[bytes]:
    """A chat stream, one read per event: role, reasoning, content, finish, usage, [DONE]."""
    return [
        chunk(role="assistant", content=""),
        *(chunk(reasoning=text) for text in reasoning),
        *(chunk(content=text) for text in texts),
        chunk(finish_reason=finish),
        usage(11, len(reasoning) + len(texts)),
        DONE,
    ]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def test_a_chat_stream_becomes_a_responses_stream() -> None:
    events = translate("responses", answer("Hel", "lo"))
    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["delta"] for e in events if e["type"].endswith(".delta")] == ["Hel", "lo"]
    final = openai.types.responses.Response.model_validate(events[-1]["response"])
    assert final.output_text == "Hello"
    assert final.status == "completed"
    assert final.instructions == "Be brief."
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 2)
    assert final.id == events[0]["response"]["id"]


def test_a_streamed_usages_details_reach_the_responses_usage() -> None:
    detailed = usage_chunk(
        "c1", "up", 7, object_name="chat.completion.chunk", prompt_tokens=7, completion_tokens=3
    )
    detailed["usage"]["prompt_tokens_details"] = {"cached_tokens": 5}
    detailed["usage"]["completion_tokens_details"] = {"reasoning_tokens": 2}
    reads = [*answer("Hi")[:-2], encode_chunk(detailed), DONE]
    final = openai.types.responses.Response.model_validate(
        translate("responses", reads)[-1]["response"]
    )
    assert final.usage is not None
    assert final.usage.input_tokens_details.cached_tokens == 5  # (not a zero made up)
    assert final.usage.output_tokens_details.reasoning_tokens == 2
    # Messages counts cached input apart: chat's prompt tokens include them
    delta = translate("messages", reads)[-2]
    assert delta["usage"] == {"output_tokens": 3, "input_tokens": 2, "cache_read_input_tokens": 5}


def test_a_chat_stream_becomes_a_messages_stream() -> None:
    events = translate("messages", answer("Hel", "lo"))
    assert types(events) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == [
        "Hel",
        "lo",
    ]
    assert events[0]["message"]["usage"]["input_tokens"] == 0  # not known yet
    delta = events[-2]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"] == {"output_tokens": 2, "input_tokens": 11}


def test_reasoning_gets_its_own_item_and_block_and_length_is_incomplete() -> None:
    reads = answer("Yes.", finish="length", reasoning=("Let me ", "think."))
    events = translate("responses", reads)
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["reasoning", "message"]
    reasoning = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    assert reasoning == ["Let me ", "think."]
    assert events[-1]["type"] == "response.incomplete"
    final = openai.types.responses.Response.model_validate(events[-1]["response"])
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output_text == "Yes."
    assert [item.type for item in final.output] == ["reasoning", "message"]

    events = translate("messages", reads)
    blocks = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert blocks == ["thinking", "text"]
    thinking = [e["delta"].get("thinking") for e in events if e["type"] == "content_block_delta"]
    assert thinking[:2] == ["Let me ", "think."]
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"


def test_a_tool_call_a_chat_upstream_makes_anyway_ends_the_turn_in_both_apis() -> None:
    # Tool calls are not translated: the call is not sent on, so neither API may say one
    # was made (a Messages tool_use stop sends a client's tool loop looking for its block).
    reads = answer("Let me check.", finish="tool_calls")
    events = translate("messages", reads)
    blocks = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert blocks == ["text"]
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    events = translate("responses", reads)
    final = openai.types.responses.Response.model_validate(events[-1]["response"])
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == "Let me check."


def test_one_read_or_many_give_the_same_events() -> None:
    reads = answer("a", "b", "c")
    for route in ("responses", "messages"):
        assert translate(route, [b"".join(reads)]) == translate(route, reads)


def test_without_a_usage_chunk_messages_count_the_deltas() -> None:
    reads = [chunk(role="assistant", content=""), chunk(content="x"), chunk(content="y")]
    reads += [chunk(finish_reason="stop"), DONE]
    assert translate("messages", reads)[-2]["usage"] == {"output_tokens": 2}
    assert translate("responses", reads)[-1]["response"]["usage"] is None


def test_an_answer_with_no_text_has_an_empty_message() -> None:
    reads = [chunk(role="assistant"), chunk(finish_reason="stop"), DONE]
    events = translate("responses", reads)
    final = openai.types.responses.Response.model_validate(events[-1]["response"])
    assert final.output_text == ""
    assert [item.type for item in final.output] == ["message"]
    starts = [e for e in translate("messages", reads) if e["type"] == "content_block_start"]
    assert [e["content_block"]["type"] for e in starts] == ["text"]


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_the_end_after_a_silence_and_an_error_close_in_the_clients_api(route: str) -> None:
    translator = stream_translator(route, "r1", model="m", created=5, request=REQUEST, max_text=99)
    cutter = line_build().EventCutter(keep_raw=False)
    out = b""
    for data in answer("a", "b")[:4]:  # up to the finish; no usage, no [DONE]
        for piece in cutter.feed(data).pieces:
            rewritten = translator.rewrite(piece)
            assert rewritten is not None
            out += rewritten.raw
    closed = client_events(route, out + translator.end())
    assert closed[-1]["type"] == ("response.completed" if route == "responses" else "message_stop")
    assert translator.end() == b""  # once

    failing = stream_translator(route, "r2", model="m", created=5, request=REQUEST, max_text=99)
    raw = failing.error("upstream 'lab' failed", "upstream_stall")
    events = [orjson.loads(item.data) for item in new_decoder().feed(raw)]  # type: ignore[union-attr]
    if route == "responses":
        assert types(events) == [
            "response.created",
            "response.in_progress",
            "error",
            "response.failed",
        ]
        for event in events:
            RESPONSES_EVENT.validate_python(event)
        assert [e["sequence_number"] for e in events] == [0, 1, 2, 3]
        assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    else:
        assert types(events) == ["message_start", "error"]
        anthropic.types.ErrorResponse.model_validate(events[-1])
        assert events[-1]["error"]["type"] == "overloaded_error"


def test_comments_go_on_and_other_named_events_do_not() -> None:
    translator = stream_translator(
        "messages", "r1", model="m", created=5, request=REQUEST, max_text=9
    )
    cutter = line_build().EventCutter(keep_raw=False)
    pieces = cutter.feed(b": keepalive\n\nevent: vendor\ndata: {}\n\n").pieces
    assert [p.kind for p in pieces] == [EventKind.KEEPALIVE, EventKind.KEEPALIVE]
    assert [translator.rewrite(p) is not None for p in pieces] == [True, False]
    assert translator.failure is None
    assert not translator.started


def test_a_responses_answer_past_its_bound_fails_instead_of_closing_cut_short() -> None:
    # A quarter of max_text is held: the closing events repeat the text four times.
    translator = stream_translator(
        "responses", "r1", model="m", created=5, request=REQUEST, max_text=20
    )
    cutter = line_build().EventCutter(keep_raw=False)
    pieces = cutter.feed(b"".join(answer("abc", "def"))).pieces
    assert translator.rewrite(pieces[1]) is not None
    numbered = translator.last_sequence
    assert translator.rewrite(pieces[2]) is None
    assert translator.last_sequence == numbered  # the refused piece took no number
    assert translator.failure is not None
    assert translator.failure.cause is Cause.OVERSIZED_EVENT
    assert "limits.max_response_bytes" in translator.failure.message


# -- whole answers ---------------------------------------------------------------------------

COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 7,
    "model": "up",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello", "reasoning_content": "Hm."},
            "finish_reason": "length",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
}


def test_a_whole_chat_completions_cached_input_is_counted_apart_in_a_message() -> None:
    cached = {
        **COMPLETION,
        "usage": {**COMPLETION["usage"], "prompt_tokens_details": {"cached_tokens": 2}},
    }
    raw = whole_answer(
        "messages", orjson.dumps(cached), "r1", model="m", created=5, request=REQUEST
    )
    message = anthropic.types.Message.model_validate_json(raw)
    assert message.usage.input_tokens == 1
    assert message.usage.cache_read_input_tokens == 2
    assert message.usage.output_tokens == 4
    raw = whole_answer(
        "messages", orjson.dumps(COMPLETION), "r1", model="m", created=5, request=REQUEST
    )
    message = anthropic.types.Message.model_validate_json(raw)
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (3, None)


def test_a_whole_chat_completion_becomes_a_response_and_a_message() -> None:
    body = orjson.dumps(COMPLETION)
    raw = whole_answer("responses", body, "r1", model="m", created=5, request=REQUEST)
    response = openai.types.responses.Response.model_validate_json(raw)
    assert response.output_text == "Hello"
    assert response.status == "incomplete"
    assert response.usage is not None
    assert response.usage.total_tokens == 7
    raw = whole_answer("messages", body, "r1", model="m", created=5, request=REQUEST)
    message = anthropic.types.Message.model_validate_json(raw)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].text == "Hello"  # type: ignore[union-attr]
    assert message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 4)


def test_a_whole_answer_in_content_parts_with_vllms_null_reasoning_content_is_read() -> None:
    # Content parts were dropped (an empty answer), and a null reasoning_content hid the
    # reasoning beside it (vLLM sends both names).
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Hel"},
            {"type": "image"},
            {"type": "text", "text": "lo"},
        ],
        "reasoning_content": None,
        "reasoning": "Hm.",
    }
    body = orjson.dumps(
        {**COMPLETION, "choices": [{**COMPLETION["choices"][0], "message": message}]}
    )  # type: ignore[dict-item]
    raw = whole_answer("responses", body, "r1", model="m", created=5, request=REQUEST)
    assert openai.types.responses.Response.model_validate_json(raw).output_text == "Hello"
    raw = whole_answer("messages", body, "r1", model="m", created=5, request=REQUEST)
    blocks = anthropic.types.Message.model_validate_json(raw).content
    assert [block.type for block in blocks] == ["thinking", "text"]
    assert blocks[0].thinking == "Hm."  # type: ignore[union-attr]
    assert blocks[1].text == "Hello"  # type: ignore[union-attr]


# -- request bodies --------------------------------------------------------------------------

CHAT_REQUEST: TypeAdapter[Any] = TypeAdapter(
    completion_create_params.CompletionCreateParamsStreaming
)


def test_a_responses_request_becomes_a_chat_request() -> None:
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Hi"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello"}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Go"},
                    {"type": "input_text", "text": " on"},
                ],
            },
        ],
        "max_output_tokens": 9,
        "temperature": 0.5,
        "reasoning": {"effort": "low"},
        "metadata": {"a": "b"},
    }
    chat = chat_request("responses", body, stream=True)
    CHAT_REQUEST.validate_python(chat)
    assert chat == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Go"}, {"type": "text", "text": " on"}],
            },
        ],
        "max_tokens": 9,
        "temperature": 0.5,
        "reasoning_effort": "low",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_a_messages_request_becomes_a_chat_request() -> None:
    body = {
        "model": "m",
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 9,
        "stop_sequences": ["END"],
        "top_p": 0.9,
    }
    chat = chat_request("messages", body, stream=False)
    assert chat == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "max_tokens": 9,
        "stop": ["END"],
        "top_p": 0.9,
    }


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        (
            "responses",
            {"input": [{"type": "function_call_output", "call_id": "c"}]},
            "input.0.type",
        ),
        (
            "responses",
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0.type",
        ),
        ("responses", {"input": "hi", "tools": [{"type": "function", "name": "f"}]}, "tools"),
        ("responses", {"previous_response_id": "resp_1"}, "previous_response_id"),
        ("responses", {"input": "hi", "instructions": 5}, "instructions"),
        ("responses", {"input": "hi", "user": 5}, "user"),  # (was dropped)
        (
            "messages",
            {
                "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
                "max_tokens": 5,
            },
            "messages.0.content.0.type",
        ),
        (
            "messages",
            {"system": [{"type": "document"}], "messages": [], "max_tokens": 5},
            "system.0.type",
        ),
    ],
)
def test_what_chat_cannot_carry_is_refused_naming_the_field(
    route: str, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(ApiError) as caught:
        chat_request(route, {"model": "m", **body}, stream=True)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.message.startswith(f"{param}: ")
    assert caught.value.code == "untranslatable"
