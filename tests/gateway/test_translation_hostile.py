"""Translation into the Responses and Messages APIs against a hostile chat upstream and odd
client requests: what the official SDKs get from the real gateway (streamed and whole), and
what the translators make of chunks that mix kinds, choices and refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from steadystream import EventKind
from steadystream.gateway import GatewayServer
from steadystream.gateway.requests import ApiError
from steadystream.gateway.translation import chat_request
from steadystream.protocol.chunks import parse_chunk
from steadystream.protocol.sse import DONE
from tests.support.gateway import gateway_config, post
from tests.support.threaded_app import ThreadedApp
from tests.support.translation import translate

pytestmark = pytest.mark.integration

SECRET = "sk-upstream-very-secret-0042"
ENV = {"UPSTREAM_KEY": SECRET}
ASK_MESSAGES: dict[str, Any] = {
    "model": "m",
    "max_tokens": 20,
    "messages": [{"role": "user", "content": "hi"}],
}


class ChatScript(ThreadedApp):
    """A chat upstream that streams :attr:`reads` (``{KEY}`` in them: the key it got), or
    answers a whole request with :attr:`whole`; it keeps the bodies it got."""

    what = "the scripted chat upstream"

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[bytes] = []
        self.whole: Any = None
        self.requests: list[dict[str, Any]] = []

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        key = request.headers.get("Authorization", "").removeprefix("Bearer ").encode()
        if not body.get("stream"):
            data = orjson.dumps(self.whole).replace(b"{KEY}", key)
            return web.Response(body=data, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for data in self.reads:
            await response.write(data.replace(b"{KEY}", key))
            await asyncio.sleep(0.002)  # (separate reads; no timing is asserted)
        return response

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)


@pytest.fixture(scope="module")
def chat_up() -> Iterator[ChatScript]:
    with ChatScript() as server:
        yield server


@pytest.fixture
def gw(chat_up: ChatScript) -> Iterator[GatewayServer]:
    entry = {
        "name": "chat-only",
        "base_url": chat_up.base_url,
        "dialects": ["chat"],
        "api_key_env": "UPSTREAM_KEY",
    }
    with GatewayServer(gateway_config(entry), env=ENV) as server:
        yield server


def chunk(delta: dict[str, Any], finish: Any = None, **choice: Any) -> bytes:
    obj = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **choice}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def whole(message: dict[str, Any], usage: Any = None, **choice: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", **choice}],
    }
    if usage is not None:
        answer["usage"] = usage
    return answer


def openai_client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)


def anthropic_client(gw: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gw.base_url.removesuffix("/v1"), api_key="unused", max_retries=0
    )


def translate_kept(route: str, reads: list[bytes]) -> list[dict[str, Any]]:
    """The client's events for ``reads``, the pieces carrying their payloads."""
    return translate(route, reads, keep_raw=True)


def texts(events: list[dict[str, Any]]) -> tuple[str, str]:
    """(reasoning, answer text) the client's events stream."""
    reasoning = answer = ""
    for event in events:
        kind = event["type"]
        if kind == "response.reasoning_text.delta":
            reasoning += event["delta"]
        elif kind == "response.output_text.delta":
            answer += event["delta"]
        elif kind == "content_block_delta":
            reasoning += event["delta"].get("thinking", "")
            answer += event["delta"].get("text", "")
    return reasoning, answer


# -- the upstream's hostile bytes -------------------------------------------------------------


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_reasoning_and_content_in_one_chunk_each_go_to_their_own_block(route: str) -> None:
    reads = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "THINK", "content": "ANSWER"}),
        chunk({}, "stop"),
        DONE,
    ]
    assert texts(translate_kept(route, reads)) == ("THINK", "ANSWER")


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_a_tool_calls_arguments_in_a_content_chunk_are_not_sent_as_text(route: str) -> None:
    call = {"index": 0, "id": "t", "function": {"name": "fn", "arguments": '{"a": 1}'}}
    reads = [
        chunk({"role": "assistant"}),
        chunk({"content": "ANSWER", "tool_calls": [call]}),
        chunk({"reasoning": "THINK", "tool_calls": [{**call, "index": -7}]}),
        chunk({}, "tool_calls"),
        DONE,
    ]
    assert texts(translate_kept(route, reads)) == ("THINK", "ANSWER")


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_only_choice_zero_of_a_chunk_of_several_is_the_answer(route: str) -> None:
    two = orjson.loads(chunk({"content": "B"})[6:])
    two["choices"] = [
        {"index": 1, "delta": {"content": "OTHER"}, "finish_reason": None},
        {"index": 0, "delta": {"content": "A"}, "finish_reason": None},
    ]
    reads = [chunk({"role": "assistant"}), b"data: " + orjson.dumps(two) + b"\n\n"]
    reads += [chunk({"content": "B"}), chunk({}, "stop"), DONE]
    assert texts(translate_kept(route, reads)) == ("", "AB")


def test_a_refusal_is_content() -> None:
    refusal = parse_chunk(chunk({"content": None, "refusal": "I can't help with that."})[6:])
    assert (refusal.kind, refusal.text) == (EventKind.CONTENT, "I can't help with that.")
    # (a refusal of null, or of another type, is no text: not a new way to fail a stream)
    assert parse_chunk(chunk({"refusal": None})[6:]).kind is EventKind.EMPTY
    assert parse_chunk(chunk({"refusal": {"x": 1}})[6:]).kind is EventKind.EMPTY


def test_the_sdks_read_an_upstreams_refusal_streamed_and_whole(
    chat_up: ChatScript, gw: GatewayServer
) -> None:
    refused = "I can't help with that."
    chat_up.reads = [
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": refused}),
        chunk({}, "stop"),
        DONE,
    ]
    chat_up.whole = whole({"role": "assistant", "content": None, "refusal": refused})
    with openai_client(gw) as client:
        with client.responses.stream(model="m", input="hi") as stream:
            streamed = stream.get_final_response()
        whole_response = client.responses.create(model="m", input="hi")
    with anthropic_client(gw) as client:
        with client.messages.stream(**ASK_MESSAGES) as messages:
            message = messages.get_final_message()
        whole_message = client.messages.create(**ASK_MESSAGES)
    assert streamed.output_text == whole_response.output_text == refused
    assert message.content[-1].text == refused  # type: ignore[union-attr]
    assert whole_message.content[-1].text == refused


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -4, "completion_tokens": -2, "total_tokens": -6},
        {"prompt_tokens": 2**63, "completion_tokens": 2**64 - 1},
        {"prompt_tokens": "7", "completion_tokens": 1.5, "total_tokens": True},
    ],
    ids=["negative", "past-64-bits", "not-integers"],
)
def test_a_whole_answers_usage_that_is_no_count_is_not_passed_on(
    chat_up: ChatScript, gw: GatewayServer, usage: dict[str, Any]
) -> None:
    chat_up.whole = whole({"role": "assistant", "content": "hi"}, usage)
    with openai_client(gw) as client:
        response = client.responses.create(model="m", input="hi")
    with anthropic_client(gw) as client:
        message = client.messages.create(**ASK_MESSAGES)
    assert response.output_text == "hi"
    assert response.usage is None  # (no count in it: none made up)
    assert message.usage.input_tokens == 0
    assert message.usage.output_tokens == 0


def test_a_whole_answer_is_its_choice_zero_whatever_the_order(
    chat_up: ChatScript, gw: GatewayServer
) -> None:
    chat_up.whole = {
        "choices": [
            {"index": 1, "message": {"content": "other"}, "finish_reason": "length"},
            {"index": 0, "message": {"content": "the answer"}, "finish_reason": "stop"},
        ]
    }
    with openai_client(gw) as client:
        response = client.responses.create(model="m", input="hi")
    with anthropic_client(gw) as client:
        message = client.messages.create(**ASK_MESSAGES)
    assert (response.output_text, response.status) == ("the answer", "completed")
    assert message.content[-1].text == "the answer"
    assert message.stop_reason == "end_turn"


def test_an_echoed_key_is_hidden_through_translation(
    chat_up: ChatScript, gw: GatewayServer
) -> None:
    # The key whole in one delta, and cut across two (the Responses API's closing events
    # then repeat it whole).
    cut = len(SECRET) // 2
    chat_up.reads = [
        chunk({"role": "assistant"}),
        chunk({"content": "you sent {KEY} "}),
        chunk({"reasoning_content": "thinking of {KEY}"}),
        chunk({"content": "and " + SECRET[:cut]}),
        chunk({"content": SECRET[cut:]}),
        chunk({}, "stop"),
        DONE,
    ]
    chat_up.whole = whole({"role": "assistant", "content": "you sent {KEY}"})
    answers = [
        post(gw.base_url, "/responses", {"model": "m", "input": "hi", "stream": True}),
        post(gw.base_url, "/messages", {**ASK_MESSAGES, "stream": True}),
        post(gw.base_url, "/responses", {"model": "m", "input": "hi"}),
        post(gw.base_url, "/messages", ASK_MESSAGES),
    ]
    assert [answer.status for answer in answers] == [200] * 4
    for answer in answers:
        assert SECRET.encode() not in answer.body
        assert b"***" in answer.body


# -- the client's odd requests ----------------------------------------------------------------


def test_an_answer_sent_back_with_its_reasoning_is_translated(
    chat_up: ChatScript, gw: GatewayServer
) -> None:
    # The SDKs' way to go on with a conversation sends the answer back as it came: with the
    # reasoning item or thinking block the gateway itself translated.
    chat_up.reads = [
        chunk({"role": "assistant"}),
        chunk({"reasoning_content": "hmm"}),
        chunk({"content": "ok"}),
        chunk({}, "stop"),
        DONE,
    ]
    chat_up.whole = whole({"role": "assistant", "content": "more"})
    with openai_client(gw) as client:
        with client.responses.stream(model="m", input="hi") as stream:
            first = stream.get_final_response()
        assert [item.type for item in first.output] == ["reasoning", "message"]
        turns: list[Any] = [
            {"role": "user", "content": "hi"},
            *first.output,
            {"role": "user", "content": "go on"},
        ]
        again = client.responses.create(model="m", input=turns)
    asked = chat_up.requests[-1]["messages"]
    assert again.output_text == "more"
    assert asked == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    with anthropic_client(gw) as client:
        with client.messages.stream(**ASK_MESSAGES) as messages:
            message = messages.get_final_message()
        assert [block.type for block in message.content] == ["thinking", "text"]
        history = [
            *ASK_MESSAGES["messages"],
            {"role": "assistant", "content": message.content},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
            {"role": "user", "content": "go on"},
        ]
        answer = client.messages.create(**{**ASK_MESSAGES, "messages": history})
    assert answer.content[-1].text == "more"
    assert chat_up.requests[-1]["messages"] == asked


@pytest.mark.parametrize(
    ("route", "field", "value"),
    [
        ("responses", "prompt", {"id": "pmpt_1", "variables": {"city": "Paris"}}),
        ("messages", "mcp_servers", [{"type": "url", "url": "https://x", "name": "x"}]),
    ],
)
def test_a_field_that_changes_the_question_is_refused_not_dropped(
    route: str, field: str, value: Any
) -> None:
    body: dict[str, Any] = (
        {"model": "m", "input": "hi"} if route == "responses" else dict(ASK_MESSAGES)
    )
    with pytest.raises(ApiError) as refused:
        chat_request(route, {**body, field: value}, stream=True)
    assert refused.value.status == 400
    assert refused.value.param == field


def test_a_thinking_block_among_the_users_own_blocks_is_still_refused() -> None:
    # (only an assistant's earlier reasoning is left out; the index named is the block's own)
    body = {
        **ASK_MESSAGES,
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "t"}, {"type": "image"}],
            }
        ],
    }
    with pytest.raises(ApiError) as refused:
        chat_request("messages", body, stream=False)
    assert refused.value.param == "messages.0.content.1.type"
    user = {**ASK_MESSAGES, "messages": [{"role": "user", "content": [{"type": "thinking"}]}]}
    with pytest.raises(ApiError) as refused:
        chat_request("messages", user, stream=False)
    assert refused.value.param == "messages.0.content.0.type"
