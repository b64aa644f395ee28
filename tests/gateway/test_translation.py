"""A lab that speaks chat (``dialects: [chat]``) serves Responses and Messages clients through
the gateway: the official SDKs get the lab's whole answer, usage and stop reason, streamed and
whole; a fault ends the stream with one in-band error in the client's API; both edges are
recorded; what cannot be translated is refused naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import openai
import orjson
import pytest

from steadystream import ConfigError, EventKind, Outcome
from steadystream.gateway import GatewayServer, config_from_mapping
from steadystream.lab import LabServer, RequestTruth
from steadystream.protocol import SseEvent
from tests.support.gateway import (
    MemorySink,
    Streamed,
    answer,
    finished_truth,
    gateway_config,
    post,
    upstream,
)
from tests.support.hostile import HostileUpstream
from tests.support.lab import scenario

pytestmark = pytest.mark.integration

# Answers of 8 to 12 tokens, 5 ms apart: they end by themselves (stop) within the limit.
FAST = scenario(
    "steady",
    scheduler={"step_base_ms": 5.0},
    output={"min_tokens": 8, "max_tokens": 12},
    kv_cache={"total_blocks": 1024},
)
PROMPT = "Tell me about steady streams."
RESPONSES = {"model": "lab", "input": PROMPT, "stream": True, "max_output_tokens": 50}
MESSAGES = {
    "model": "lab",
    "messages": [{"role": "user", "content": PROMPT}],
    "stream": True,
    "max_tokens": 50,
}
BODIES = {"/responses": RESPONSES, "/messages": MESSAGES}
CHAT_ONLY: dict[str, Any] = {"dialects": ["chat"], "forward_headers": ["X-Lab-Fault"]}
FAULT = {"X-Lab-Fault": "error-after=3"}


@pytest.fixture
def lab() -> Iterator[LabServer]:  # (one per test: each build's requests reuse the ids)
    with LabServer(FAST, seed=3) as server:
        yield server


def lab_answer(lab: LabServer, request_id: str) -> tuple[str, RequestTruth]:
    truth = finished_truth(lab, request_id)
    assert truth.endpoint == "chat"  # translated: the lab was asked in chat
    return "".join(answer(truth)), truth


def typed_events(streamed: Streamed) -> list[dict[str, Any]]:
    return [orjson.loads(item.data) for _, item in streamed.items if isinstance(item, SseEvent)]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(
        e["delta"]
        if e["type"] == "response.output_text.delta"
        else e["delta"].get("text", "")
        if e["type"] == "content_block_delta"
        else ""
        for e in events
    )


def test_the_openai_sdk_reads_a_chat_upstream_as_the_responses_api(
    lab: LabServer, sink: MemorySink
) -> None:
    with (
        GatewayServer(gateway_config(upstream(lab, "lab", **CHAT_ONLY)), recorder=sink) as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0) as client,
    ):
        asked: dict[str, Any] = {"model": "lab", "input": PROMPT, "max_output_tokens": 50}
        events = list(
            client.responses.create(**asked, stream=True, extra_headers={"X-Request-Id": "tr-r1"})
        )
        with client.responses.stream(**asked, extra_headers={"X-Request-Id": "tr-r2"}) as stream:
            final = stream.get_final_response()
        whole = client.responses.create(**asked, extra_headers={"X-Request-Id": "tr-r3"})
        failing = list(client.responses.create(**asked, stream=True, extra_headers=FAULT))
    assert [e.type for e in failing][-2:] == ["error", "response.failed"]
    assert "lab fault" in failing[-2].message
    text, truth = lab_answer(lab, "tr-r1")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))
    done = events[-1]
    assert done.type == (
        "response.completed" if truth.finish_reason == "stop" else "response.incomplete"
    )
    assert done.response.usage is not None
    assert done.response.usage.output_tokens == truth.tokens_generated
    assert done.response.usage.input_tokens == truth.prompt_tokens

    text, truth = lab_answer(lab, "tr-r2")
    assert final.output_text == text
    assert final.usage is not None
    assert final.usage.output_tokens == truth.tokens_generated

    text, _ = lab_answer(lab, "tr-r3")
    assert whole.output_text == text
    assert whole.object == "response"

    up, down = sink.edges("tr-r1")
    tokens = len(answer(finished_truth(lab, "tr-r1")))
    for timeline in (up, down):
        assert timeline.outcome is Outcome.COMPLETE
        kinds = [EventKind(k) for k in timeline.kinds]
        assert kinds.count(EventKind.CONTENT) == tokens
        assert kinds[0] is EventKind.ROLE
        assert timeline.usage is not None
        assert timeline.usage["completion_tokens"] == finished_truth(lab, "tr-r1").tokens_generated
    assert up.meta["attempts"][0]["api"] == "chat"


def test_the_anthropic_sdk_reads_a_chat_upstream_as_the_messages_api(
    lab: LabServer, sink: MemorySink
) -> None:
    with (
        GatewayServer(gateway_config(upstream(lab, "lab", **CHAT_ONLY)), recorder=sink) as gw,
        anthropic.Anthropic(
            base_url=gw.base_url.removesuffix("/v1"), api_key="unused", max_retries=0
        ) as client,
    ):
        asked: dict[str, Any] = {
            "model": "lab",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": PROMPT}],
        }
        with client.messages.stream(**asked, extra_headers={"X-Request-Id": "tr-m1"}) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        whole = client.messages.create(**asked, extra_headers={"X-Request-Id": "tr-m2"})
        with (
            pytest.raises(anthropic.APIStatusError, match="lab fault"),
            client.messages.stream(**asked, extra_headers=FAULT) as failing,
        ):
            "".join(failing.text_stream)
    text, truth = lab_answer(lab, "tr-m1")
    assert streamed == text
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == ("end_turn" if truth.finish_reason == "stop" else "max_tokens")
    assert final.usage.output_tokens == truth.tokens_generated
    assert final.usage.input_tokens == truth.prompt_tokens
    up, down = sink.edges("tr-m1")
    for timeline in (up, down):
        kinds = [EventKind(k) for k in timeline.kinds]
        assert kinds.count(EventKind.CONTENT) == len(answer(truth))
        assert timeline.outcome is Outcome.COMPLETE
    text, truth = lab_answer(lab, "tr-m2")
    assert whole.content[0].text == text
    assert whole.stop_reason == "end_turn"
    assert whole.usage.output_tokens == truth.tokens_written


@pytest.mark.parametrize("path", ["/responses", "/messages"])
@pytest.mark.parametrize("fault", ["error-after=3", "stall-after=3:forever"])
def test_a_fault_mid_stream_ends_with_one_error_in_the_clients_api(
    lab: LabServer, sink: MemorySink, path: str, fault: str
) -> None:
    config = gateway_config(
        upstream(lab, "lab", fault=fault, **CHAT_ONLY), failover={"wait_without_fallback": False}
    )
    request_id = f"tr-{fault[:5]}{path[1:]}"
    with GatewayServer(config, recorder=sink) as gw:
        streamed = post(gw.base_url, path, BODIES[path], {"X-Request-Id": request_id})
    assert streamed.status == 200
    events = typed_events(streamed)
    errors = [e for e in events if e["type"] in ("error", "response.failed")]
    if path == "/responses":
        assert [e["type"] for e in errors] == ["error", "response.failed"]
        assert events[-1]["type"] == "response.failed"
        numbers = [e["sequence_number"] for e in events]
        assert numbers == list(range(len(events)))
        assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    else:
        assert [e["type"] for e in errors] == ["error"]
        assert events[-1]["type"] == "error"
    assert text_of(events) == "".join(answer(finished_truth(lab, request_id))[:3])
    _, down = sink.edges(request_id)
    assert down.outcome is Outcome.ERROR


@pytest.mark.parametrize("path", ["/responses", "/messages"])
def test_an_upstream_silent_after_its_finish_is_closed_in_the_clients_api(
    lab: LabServer, path: str
) -> None:
    config = gateway_config(
        upstream(lab, "lab", fault="silent-finish=5s", **CHAT_ONLY),
        watchdog={"finish_timeout": "200ms"},
    )
    request_id = f"tr-silent{path[1:]}"
    with GatewayServer(config) as gw:
        streamed = post(gw.base_url, path, BODIES[path], {"X-Request-Id": request_id})
    events = typed_events(streamed)
    assert events[-1]["type"] in ("response.completed", "response.incomplete", "message_stop")
    assert text_of(events) == "".join(answer(finished_truth(lab, request_id)))


@contextmanager
def _failing_first(how: str) -> Iterator[dict[str, Any]]:
    """The first upstream's entry: one that sends nothing in time (``slow``), or one whose
    role chunk goes out (the gateway's opening events with it) before it breaks (``opened``)."""
    if how == "slow":
        with LabServer(FAST, seed=4) as slow:
            # Its own first-token timeout, 2 s short of its 3 s: the test-sized 3 s would
            # race the token it holds back.
            yield upstream(
                slow,
                "slow",
                fault="slow-first-token=3s",
                timeouts={"first_token": "1s"},
                **CHAT_ONLY,
            )
    else:
        with HostileUpstream(default="adv-role-close") as broken:
            yield {"name": "broken", "base_url": broken.base_url, **CHAT_ONLY}


@pytest.mark.parametrize("how", ["slow", "opened"])
@pytest.mark.parametrize("path", ["/responses", "/messages"])
def test_a_translated_stream_fails_over_before_its_first_token(
    sink: MemorySink, path: str, how: str
) -> None:
    # Until a token went out, the next upstream's tokens follow what the client has (its
    # opening events, if any: the translator's own, numbered on), one start, no error.
    with _failing_first(how) as first, LabServer(FAST, seed=4) as backup:
        config = gateway_config(first, upstream(backup, "backup", priority=1, **CHAT_ONLY))
        request_id = f"tr-fo-{how}{path[1:]}"
        with GatewayServer(config, recorder=sink) as gw:
            streamed = post(gw.base_url, path, BODIES[path], {"X-Request-Id": request_id})
        truth = finished_truth(backup, f"{request_id}.f1")
    events = typed_events(streamed)
    assert text_of(events) == "".join(answer(truth))
    assert [e["type"] for e in events].count(events[0]["type"]) == 1  # one start
    assert all(e["type"] not in ("error", "response.failed") for e in events)
    if path == "/responses":
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
    _, down = sink.edges(request_id)
    assert down.outcome is Outcome.FAILED_OVER


def test_an_upstream_is_called_in_the_clients_api_when_it_speaks_it(lab: LabServer) -> None:
    both = upstream(lab, "lab", dialects=["messages", "chat"])
    with GatewayServer(gateway_config(both)) as gw:
        streamed = post(gw.base_url, "/messages", MESSAGES, {"X-Request-Id": "tr-native"})
        chat = post(
            gw.base_url,
            "/chat/completions",
            {"model": "lab", "messages": MESSAGES["messages"], "stream": True, "max_tokens": 5},
            {"X-Request-Id": "tr-chat"},
        )
    assert streamed.status == chat.status == 200
    assert finished_truth(lab, "tr-native").endpoint == "messages"
    assert finished_truth(lab, "tr-chat").endpoint == "chat"


def test_what_chat_cannot_carry_is_refused_when_it_must_be_translated(lab: LabServer) -> None:
    items = {
        **RESPONSES,
        "input": [{"type": "function_call_output", "call_id": "c1", "output": "4"}],
    }
    with GatewayServer(gateway_config(upstream(lab, "lab", **CHAT_ONLY))) as gw:
        refused = post(gw.base_url, "/responses", items)
        image = {**MESSAGES, "messages": [{"role": "user", "content": [{"type": "image"}]}]}
        refused_image = post(gw.base_url, "/messages", image)
    assert refused.status == 400
    assert refused.json()["error"]["param"] == "input.0.type"
    assert refused_image.status == 400
    assert "messages.0.content.0.type" in refused_image.json()["error"]["message"]
    # An upstream that speaks the Responses API takes the same request as it is.
    config = gateway_config(
        upstream(lab, "chat-only", **CHAT_ONLY), upstream(lab, "native", priority=1)
    )
    with GatewayServer(config) as gw:
        served = post(gw.base_url, "/responses", items, {"X-Request-Id": "tr-native-items"})
    assert served.status == 200
    assert finished_truth(lab, "tr-native-items").endpoint == "responses"


def test_an_upstream_that_speaks_neither_the_api_nor_chat_is_not_asked(lab: LabServer) -> None:
    config = gateway_config(upstream(lab, "lab", dialects=["completions"]))
    with GatewayServer(config) as gw:
        refused = post(gw.base_url, "/responses", RESPONSES)
    assert refused.status == 404
    assert "dialects" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("dialects", "needles"),
    [
        (["chat", "grpc"], ["upstreams.0.dialects.1", "'grpc'", "'responses'"]),
        ([], ["upstreams.0.dialects", "at least one"]),
        (["chat", "chat"], ["upstreams.0.dialects", "chat named twice"]),
    ],
)
def test_bad_dialects_are_refused_naming_the_key(dialects: list[str], needles: list[str]) -> None:
    entry = {"name": "lab", "base_url": "http://127.0.0.1:8000/v1", "dialects": dialects}
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"upstreams": [entry]})
    for needle in needles:
        assert needle in str(caught.value)
