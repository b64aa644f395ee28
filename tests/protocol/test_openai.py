"""What one OpenAI-compatible payload means (parse_chunk), and the payloads servers build."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from steadystream import EventKind, ProtocolError
from steadystream.protocol import (
    Chunk,
    SseEvent,
    chat_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
    is_done,
    parse_chunk,
    usage_chunk,
)
from tests.support.sse import CHAT, decode_reads


def chat(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return orjson.dumps({"id": "c", "object": CHAT, "choices": [choice], **extra})


# -- chat shape ---------------------------------------------------------------------------------


def test_a_role_only_opener_is_role_not_content() -> None:
    assert parse_chunk(chat({"role": "assistant", "content": ""})) == Chunk(EventKind.ROLE)
    assert parse_chunk(chat({"role": "assistant"})).kind is EventKind.ROLE


def test_a_role_with_text_is_content() -> None:
    assert parse_chunk(chat({"role": "assistant", "content": "Hi"})) == Chunk(
        EventKind.CONTENT, "Hi"
    )


@pytest.mark.parametrize("delta", [{}, {"content": ""}, {"content": None}])
def test_empty_deltas_are_empty(delta: dict[str, Any]) -> None:
    assert parse_chunk(chat(delta)) == Chunk(EventKind.EMPTY)


def test_a_finish_only_chunk_is_empty_with_its_reason() -> None:
    assert parse_chunk(chat({}, "stop")) == Chunk(EventKind.EMPTY, finish_reason="stop")


def test_content_with_finish_reason() -> None:
    assert parse_chunk(chat({"content": "end."}, "length")) == Chunk(
        EventKind.CONTENT, "end.", "length"
    )


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_deltas(key: str) -> None:
    got = parse_chunk(chat({"content": None, key: "Let me think"}))
    assert got == Chunk(EventKind.REASONING, "Let me think")


def test_content_wins_the_kind_when_a_delta_carries_both() -> None:
    got = parse_chunk(chat({"reasoning_content": "hmm", "content": "Yes"}))
    assert got == Chunk(EventKind.CONTENT, "hmmYes")


def test_tool_call_deltas_carry_the_name_then_the_arguments() -> None:
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    later = {"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}
    assert parse_chunk(chat({"tool_calls": [first]})) == Chunk(EventKind.TOOL_CALL, "get_weather")
    assert parse_chunk(chat({"tool_calls": [later]})) == Chunk(
        EventKind.TOOL_CALL, '{"city": "Oslo"}'
    )
    assert parse_chunk(chat({"tool_calls": [{"index": 0}]})).kind is EventKind.EMPTY


def test_the_deprecated_function_call_delta() -> None:
    got = parse_chunk(chat({"function_call": {"name": "f", "arguments": "{}"}}))
    assert got == Chunk(EventKind.TOOL_CALL, "f{}")


def test_a_usage_only_tail() -> None:
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 9,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    payload = orjson.dumps({"id": "c", "object": CHAT, "choices": [], "usage": usage})
    assert parse_chunk(payload) == Chunk(
        EventKind.USAGE,
        # (a detail a translation carries on comes up flat; the rest of the details go)
        usage={"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12, "cached_tokens": 0},
    )
    assert parse_chunk(orjson.dumps({"usage": usage})).kind is EventKind.USAGE


def test_empty_choices_without_usage_are_empty() -> None:
    # Azure sends a first chunk like this, carrying content-filter results.
    payload = orjson.dumps({"id": "", "choices": [], "prompt_filter_results": []})
    assert parse_chunk(payload) == Chunk(EventKind.EMPTY)


def test_per_chunk_usage_rides_along_with_content() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    got = parse_chunk(chat({"content": "abc"}, usage=usage))
    assert got == Chunk(EventKind.CONTENT, "abc", usage=usage)


def test_str_and_bytes_payloads_agree() -> None:
    payload = chat({"content": "é"})
    assert parse_chunk(payload) == parse_chunk(payload.decode()) == Chunk(EventKind.CONTENT, "é")


# -- completions shape --------------------------------------------------------------------------


def test_completions_text_chunks() -> None:
    assert parse_chunk(orjson.dumps(completion_chunk("x", "m", 1, text=" the"))) == Chunk(
        EventKind.CONTENT, " the"
    )
    done = completion_chunk("x", "m", 1, text="", finish_reason="stop")
    assert parse_chunk(orjson.dumps(done)) == Chunk(EventKind.EMPTY, finish_reason="stop")


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (error_payload("model overloaded"), "model overloaded"),
        ({"error": "rate limited"}, "rate limited"),
        (
            {"object": "error", "message": "bad input", "type": "BadRequestError", "code": 400},
            "bad input",
        ),
        ({"error": {"object": "error", "message": "oom", "code": 500}}, "oom"),
        ({"error": {"code": 500}}, '{"code":500}'),
    ],
)
def test_error_payloads(payload: dict[str, Any], message: str) -> None:
    assert parse_chunk(orjson.dumps(payload)) == Chunk(EventKind.ERROR, error=message)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (orjson.dumps(error_payload("upstream died")), "upstream died"),
        ('{"message": "stopped"}', "stopped"),
        ("plain words", "plain words"),
        ("", "error event with no message"),
        # A server's line breaks and terminal escapes would forge lines in a log.
        ("down\nINFO request 2: ok", "down INFO request 2: ok"),
        (orjson.dumps(error_payload("a\r\n\x1b[31mb\u2028c")), "a [31mb c"),
        (orjson.dumps({"error": {"detail": "x\ny"}}), '{"detail":"x\\ny"}'),
    ],
)
def test_an_error_event_is_an_error_whatever_its_data(data: str | bytes, message: str) -> None:
    assert parse_chunk(data, event="error") == Chunk(EventKind.ERROR, error=message)


def test_malformed_json_is_a_protocol_error_from_orjson() -> None:
    with pytest.raises(ProtocolError, match=r"not valid JSON.*'\{\"choices\": \['") as info:
        parse_chunk('{"choices": [')
    assert isinstance(info.value.__cause__, orjson.JSONDecodeError)


def test_done_is_not_a_chunk() -> None:
    assert is_done("[DONE]")
    assert is_done(b"[DONE]\n")
    assert not is_done('{"content": "[DONE]"}')
    with pytest.raises(ProtocolError, match=r"is_done\(\)"):
        parse_chunk("[DONE]")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "must be a JSON object, got a list"),
        ({"id": "x"}, "no choices, usage or error"),
        ({"choices": {}}, "choices is an object, expected a list"),
        ({"choices": ["x"]}, r"choices\[0\] is a string"),
        ({"choices": [{"delta": "hi"}]}, r"choices\[0\].delta is a string"),
        ({"choices": [{"delta": {"content": 5}}]}, r"choices\[0\].delta.content is a number"),
        ({"choices": [{"text": ["a"]}]}, r"choices\[0\].text is a list"),
        ({"choices": [{"delta": {}, "finish_reason": True}]}, "finish_reason is a boolean"),
        ({"choices": [{"delta": {"tool_calls": {}}}]}, "tool_calls is an object"),
        ({"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}, "function is a string"),
        ({"choices": [], "usage": 3}, "usage is a number"),
    ],
)
def test_wrong_shapes_say_what_is_wrong(payload: Any, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_chunk(orjson.dumps(payload))


# -- building payloads --------------------------------------------------------------------------


def test_chat_chunk_has_the_vllm_field_set() -> None:
    chunk = chat_chunk("chatcmpl-1", "gemma", 1700000000, role="assistant", content="")
    assert chunk == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gemma",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    reasoning = chat_chunk("c", "m", 1, reasoning="so", finish_reason="stop")
    assert reasoning["choices"][0]["delta"] == {"reasoning_content": "so"}
    assert reasoning["choices"][0]["finish_reason"] == "stop"


def test_built_chunks_parse_back() -> None:
    cases = [
        (chat_chunk("c", "m", 1, role="assistant", content=""), Chunk(EventKind.ROLE)),
        (chat_chunk("c", "m", 1, content="hi"), Chunk(EventKind.CONTENT, "hi")),
        (chat_chunk("c", "m", 1, reasoning="so"), Chunk(EventKind.REASONING, "so")),
        (
            chat_chunk(
                "c", "m", 1, content="", finish_reason="stop", usage={"completion_tokens": 2}
            ),
            Chunk(EventKind.EMPTY, finish_reason="stop", usage={"completion_tokens": 2}),
        ),
        (
            usage_chunk("c", "m", 1, object_name=CHAT, prompt_tokens=4, completion_tokens=6),
            Chunk(
                EventKind.USAGE,
                usage={"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10},
            ),
        ),
        (error_payload("boom", code=503), Chunk(EventKind.ERROR, error="boom")),
    ]
    for payload, expected in cases:
        assert parse_chunk(orjson.dumps(payload)) == expected


def test_usage_chunk_and_error_payload_shapes() -> None:
    tail = usage_chunk(
        "c", "m", 1, object_name="text_completion", prompt_tokens=1, completion_tokens=2
    )
    assert tail["object"] == "text_completion"
    assert tail["choices"] == []
    assert tail["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert error_payload("bad", "invalid_request_error", code=400, param="model") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "model", "code": 400}
    }


def test_encode_chunk_is_one_sse_event_of_the_json() -> None:
    payload = chat_chunk("c", "m", 1, content="line one\nline two\r\n")
    body = encode_chunk(payload)
    items, _ = decode_reads([body])
    assert items == [SseEvent(orjson.dumps(payload).decode(), wire_bytes=len(body))]


def test_the_openai_sdk_accepts_what_we_build() -> None:
    types = pytest.importorskip("openai.types")
    chat_types = pytest.importorskip("openai.types.chat")
    built = [
        chat_chunk("c", "m", 1, role="assistant", content=""),
        chat_chunk("c", "m", 1, content="hi", finish_reason="stop"),
        usage_chunk("c", "m", 1, object_name=CHAT, prompt_tokens=1, completion_tokens=1),
    ]
    for payload in built:
        parsed = chat_types.ChatCompletionChunk.model_validate(payload, strict=False)
        assert parsed.model_dump(exclude_unset=True) == payload
    completion = completion_chunk("c", "m", 1, text="x", finish_reason="length")
    parsed = types.Completion.model_validate(completion)
    assert parsed.choices[0].text == "x"


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_payload_deeper_than_orjson_writes_is_written_by_the_standard_encoder() -> None:
    # orjson reads 1,024 levels and writes 254: what an upstream sent between the two is
    # re-encoded all the same (a pacer re-sends a finish chunk without its text).
    payload = {"choices": [], "x": _nested(300)}
    assert orjson.loads(encode_chunk(payload).removeprefix(b"data: ")) == payload
    with pytest.raises(ProtocolError, match="nested too deep"):
        encode_chunk({"x": _nested(100_000)})


def test_an_error_nested_deep_is_still_an_error_with_a_message() -> None:
    data = '{"error": ' + "[" * 300 + "]" * 300 + "}"  # (more than orjson writes)
    chunk = parse_chunk(data)
    assert chunk.kind is EventKind.ERROR
    assert chunk.error is not None
    assert chunk.error.startswith("[[[")
