"""Client request checks: a 400 that names the field."""

from __future__ import annotations

import orjson
import pytest

from steadystream.gateway.requests import ApiError, parse_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def check(body: object, route: str = "chat") -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_request(orjson.dumps(body), route)  # type: ignore[arg-type]
    assert caught.value.status == 400
    return caught.value


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": CHAT["messages"]}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({**CHAT, "stream": "yes"}, "stream"),
        ({**CHAT, "max_tokens": 0}, "max_tokens"),
        ({**CHAT, "temperature": 3}, "temperature"),
        ({**CHAT, "top_p": 0}, "top_p"),
        ({**CHAT, "n": 0}, "n"),
        ({**CHAT, "stream_options": {"include_usage": "y"}}, "stream_options.include_usage"),
    ],
)
def test_bad_fields_are_named(body: dict[str, object], param: str) -> None:
    error = check(body)
    assert error.param == param
    assert error.message.startswith(param)


def test_bad_json_and_bad_prompts() -> None:
    with pytest.raises(ApiError, match="not valid JSON"):
        parse_request(b"{", "chat")
    assert check([1, 2]).message == "the body must be a JSON object"
    assert check({"model": "m", "prompt": [1, "a"]}, "completions").param == "prompt"


def test_a_good_request_keeps_its_body() -> None:
    body = {**CHAT, "stream": True, "max_completion_tokens": 9, "vendor_field": {"x": 1}}
    request = parse_request(orjson.dumps(body), "chat")
    assert request.stream
    assert request.max_tokens == 9
    assert request.body["vendor_field"] == {"x": 1}
    completion = parse_request(orjson.dumps({"model": "m", "prompt": ["one"]}), "completions")
    assert completion.prompt_is_text
    tokens = parse_request(orjson.dumps({"model": "m", "prompt": [1, 2]}), "completions")
    assert not tokens.prompt_is_text
