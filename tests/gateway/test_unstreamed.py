"""An upstream that answers a stream request whole (application/json) is relayed as the stream
it would have been (gateway/unstreamed.py), in every API the client asks in.

Before, that body held no event: the client got ``upstream_reset`` ("closed mid-event") in
place of a whole, valid answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from steadystream import EventKind, Outcome
from steadystream.gateway import GatewayServer
from steadystream.gateway.unstreamed import as_stream
from steadystream.protocol import SseEvent, new_decoder
from tests.support.gateway import MemorySink, chat_body, gateway_config, post
from tests.support.threaded_app import ThreadedApp

pytestmark = pytest.mark.integration

KEY = "sk-unstreamed-0123456789"
TEXT = "Steady streams feel fast."
WHOLE: dict[str, Any] = {
    "id": "chatcmpl-whole",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": TEXT, "reasoning_content": "Think."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
}


class WholeOnly(ThreadedApp):
    """Answers every request whole, whatever ``stream`` says: :attr:`answer` as JSON."""

    what = "the upstream that never streams"

    def __init__(self) -> None:
        super().__init__()
        self.answer: Any = WHOLE
        self.content_type = "application/json"
        self.asked: list[dict[str, Any]] = []

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        self.asked.append(await request.json())
        data = self.answer if isinstance(self.answer, bytes) else orjson.dumps(self.answer)
        return web.Response(body=data, headers={"Content-Type": self.content_type})

    def routes(self, app: web.Application) -> None:
        for path in ("chat/completions", "completions", "responses", "messages"):
            app.router.add_post(f"/v1/{path}", self._answer)


@pytest.fixture
def whole_only() -> Iterator[WholeOnly]:
    with WholeOnly() as server:
        yield server


def entry(server: WholeOnly, **extra: Any) -> dict[str, Any]:
    return {"name": "whole", "base_url": server.base_url, "api_key_env": "UP_KEY", **extra}


def test_a_whole_chat_answer_reaches_the_openai_sdk_as_a_stream(whole_only: WholeOnly) -> None:
    sink = MemorySink()
    with (
        GatewayServer(gateway_config(entry(whole_only)), recorder=sink, env={"UP_KEY": KEY}) as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0) as client,
    ):
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Request-Id": "whole-1"},
        )
        chunks = list(stream)
        _, down = sink.edges("whole-1")
    assert whole_only.asked[0]["stream"] is True  # (asked to stream; it did not)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6
    assert down.outcome is Outcome.COMPLETE
    kinds = list(down.kinds)
    assert EventKind.CONTENT in kinds
    assert EventKind.REASONING in kinds


@pytest.mark.parametrize("route", ["responses", "messages"])
def test_a_whole_chat_answer_is_translated_for_responses_and_messages_clients(
    whole_only: WholeOnly, route: str
) -> None:
    config = gateway_config(entry(whole_only, dialects=["chat"]))
    with GatewayServer(config, env={"UP_KEY": KEY}) as gw:
        if route == "responses":
            with openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0) as client:
                events = list(client.responses.create(model="m", input="hi", stream=True))
            completed = events[-1]
            assert completed.type == "response.completed"
            assert completed.response.output_text == TEXT
        else:
            root = gw.base_url.removesuffix("/v1")
            asked = {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
            with (
                anthropic.Anthropic(base_url=root, api_key="unused", max_retries=0) as client,
                client.messages.stream(model="m", **asked) as stream,  # type: ignore[arg-type]
            ):
                message = stream.get_final_message()
            texts = [block.text for block in message.content if block.type == "text"]
            assert texts == [TEXT]
            assert message.stop_reason == "end_turn"


def test_a_whole_completion_reaches_a_completions_client(whole_only: WholeOnly) -> None:
    whole_only.answer = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": TEXT, "finish_reason": "length"}],
    }
    with GatewayServer(gateway_config(entry(whole_only)), env={"UP_KEY": KEY}) as gw:
        body = {"model": "m", "prompt": "hi", "stream": True, "max_tokens": 5}
        answered = post(gw.base_url, "/completions", body)
    events = [e for _, e in answered.items if isinstance(e, SseEvent)]
    assert events[-1].data == "[DONE]"
    payloads = [orjson.loads(e.data) for e in events[:-1]]
    assert "".join(c["text"] for p in payloads for c in p["choices"]) == TEXT
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    assert answered.done


def test_tool_calls_of_a_whole_answer_are_streamed(whole_only: WholeOnly) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    whole_only.answer = {
        **WHOLE,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
    }
    with (
        GatewayServer(gateway_config(entry(whole_only)), env={"UP_KEY": KEY}) as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0) as client,
    ):
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.id, tc.function.name, tc.function.arguments) for tc in calls] == [  # type: ignore[union-attr]
        ("call_1", "f", '{"a":1}')
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"error": {"message": f"no such model (key {KEY})"}}, "the answer is an error: no such"),
        (b"[1, 2]", "not a completion"),
        (b"{not json", "not JSON"),
        ({"choices": ["x"]}, "choice 0 is not an object"),
    ],
    ids=["error-object", "not-an-object", "not-json", "bad-choice"],
)
def test_a_whole_answer_that_is_no_completion_is_an_error_naming_why(
    whole_only: WholeOnly, answer: Any, said: str
) -> None:
    whole_only.answer = answer
    with GatewayServer(gateway_config(entry(whole_only)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert answered.status == 502
    message = orjson.loads(answered.body)["error"]["message"]
    assert "answered a stream request whole" in message
    assert said in message
    assert KEY not in message  # (the upstream's text is scrubbed of its key)


def test_a_whole_answer_past_the_response_bound_is_refused(whole_only: WholeOnly) -> None:
    whole_only.answer = {**WHOLE, "padding": "x" * 70_000}
    config = gateway_config(entry(whole_only), limits={"max_response_bytes": "64KiB"})
    with GatewayServer(config, env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert answered.status == 502
    assert "limits.max_response_bytes" in orjson.loads(answered.body)["error"]["message"]


def test_a_native_responses_upstream_answering_whole_is_refused_naming_why(
    whole_only: WholeOnly,
) -> None:
    whole_only.answer = {"id": "resp_1", "object": "response", "output": []}
    config = gateway_config(entry(whole_only, dialects=["responses"]))
    with GatewayServer(config, env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/responses", {"model": "m", "input": "hi", "stream": True})
    assert answered.status == 502
    assert "chat and completions only" in orjson.loads(answered.body)["error"]["message"]


def test_the_stream_of_a_whole_answer_reads_back_as_its_events() -> None:
    two = {
        **WHOLE,
        "choices": [
            {"index": 1, "message": {"content": "b"}, "finish_reason": "stop"},
            {"index": 0, "message": {"content": "a"}, "finish_reason": None},
        ],
    }
    data = as_stream("chat", orjson.dumps(two))
    events = [e for e in new_decoder().feed(data) if isinstance(e, SseEvent)]
    assert events[-1].data == "[DONE]"
    payloads = [orjson.loads(e.data) for e in events[:-1]]
    by_choice: dict[int, str] = {}
    finishes: dict[int, str] = {}
    for payload in payloads[:-1]:
        (choice,) = payload["choices"]
        by_choice[choice["index"]] = by_choice.get(choice["index"], "") + (
            choice["delta"].get("content") or ""
        )
        if choice["finish_reason"] is not None:
            finishes[choice["index"]] = choice["finish_reason"]
    assert by_choice == {0: "a", 1: "b"}
    assert finishes == {0: "stop", 1: "stop"}  # (a finish the answer left out: stop)
    assert payloads[-1]["choices"] == []
    assert payloads[-1]["usage"] == WHOLE["usage"]


def test_events_under_the_json_type_are_relayed_as_the_events_they_are(
    whole_only: WholeOnly,
) -> None:
    # A server that streams with the wrong type: of a known length, it is read whole and
    # relayed as it is; chunked (no length), it is read as a stream from the start.
    events = b"".join(
        b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1,
                                  "model": "m", "choices": [{"index": 0, "delta": delta,
                                  "finish_reason": finish}]}) + b"\n\n"
        for delta, finish in (({"role": "assistant", "content": "Hel"}, None),
                              ({"content": "lo"}, None), ({}, "stop"))
    ) + b"data: [DONE]\n\n"  # fmt: skip
    whole_only.answer = events
    with GatewayServer(gateway_config(entry(whole_only)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert answered.status == 200
    assert answered.text == "Hello"
    assert answered.done


def test_a_json_typed_answer_of_no_known_length_is_read_as_a_stream() -> None:
    from steadystream.gateway.unstreamed import answered_whole
    from steadystream.stamped import ResponseHead

    def head(**headers: str) -> ResponseHead:
        return ResponseHead(200, "OK", headers, 0)

    assert answered_whole(head(**{"content-type": "application/json", "content-length": "9"}))
    assert answered_whole(
        head(**{"content-type": "Application/JSON; charset=utf-8", "content-length": "9"})
    )
    assert not answered_whole(head(**{"content-type": "application/json"}))  # (chunked)
    assert not answered_whole(head(**{"content-type": "text/event-stream"}))
