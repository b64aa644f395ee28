"""The gateway's Responses and Messages routes: relayed as they come, read by their dialect,
failed over while the client has had nothing, ended with an in-band error in the API's own
shape once it has; the official SDKs read them unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

from steadystream import EventKind, Outcome
from steadystream.gateway import GatewayServer
from steadystream.protocol import new_decoder
from tests.support.gateway import (
    MemorySink,
    Streamed,
    connect,
    gateway_config,
    post,
    raw_request,
    read_until,
    wait_for,
)
from tests.support.typed_upstream import WORDS, TypedUpstream

pytestmark = pytest.mark.integration

ANSWER = "".join(WORDS)
RESPONSES = {"model": "m", "input": "hi", "stream": True, "max_output_tokens": 50}
MESSAGES = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 50,
}


@pytest.fixture(scope="module")
def primary() -> Iterator[TypedUpstream]:
    with TypedUpstream("primary") as server:
        yield server


@pytest.fixture(scope="module")
def backup() -> Iterator[TypedUpstream]:
    with TypedUpstream("backup") as server:
        yield server


def entry(server: TypedUpstream, priority: int = 0, **extra: Any) -> dict[str, Any]:
    return {"name": server.name, "base_url": server.base_url, "priority": priority, **extra}


def typed_events(streamed: Streamed) -> list[dict[str, Any]]:
    decoder = new_decoder()
    items = decoder.feed(streamed.body)
    return [orjson.loads(item.data) for item in items if getattr(item, "data", "")]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(
        e.get("delta", "")
        if e["type"] == "response.output_text.delta"
        else e["delta"].get("text", "")
        if e["type"] == "content_block_delta"
        else ""
        for e in events
    )


@pytest.mark.parametrize(("path", "body"), [("/responses", RESPONSES), ("/messages", MESSAGES)])
def test_a_typed_stream_is_relayed_whole_and_recorded_in_its_dialect(
    primary: TypedUpstream, sink: MemorySink, path: str, body: dict[str, Any]
) -> None:
    with GatewayServer(gateway_config(entry(primary)), recorder=sink) as gw:
        streamed = post(gw.base_url, path, body, {"X-Request-Id": f"ok{path[1:]}"})
    assert streamed.status == 200
    events = typed_events(streamed)
    assert text_of(events) == ANSWER
    up, down = sink.edges(f"ok{path[1:]}")
    for timeline in (up, down):
        assert timeline.outcome is Outcome.COMPLETE
        kinds = [EventKind(k) for k in timeline.kinds]
        assert kinds.count(EventKind.CONTENT) == len(WORDS)
        assert kinds[0] is EventKind.ROLE  # the response or message began: not a token
        assert timeline.usage is not None
        assert timeline.usage["completion_tokens"] == len(WORDS)
    if path == "/responses":
        numbers = [e["sequence_number"] for e in events]
        assert numbers == sorted(set(numbers))


@pytest.fixture(scope="module")
def down() -> Iterator[TypedUpstream]:
    with TypedUpstream("down", refuse=True) as server:
        yield server


@pytest.mark.parametrize(("path", "body"), [("/responses", RESPONSES), ("/messages", MESSAGES)])
def test_an_upstream_that_refuses_is_failed_over_before_anything_is_sent(
    down: TypedUpstream,
    backup: TypedUpstream,
    sink: MemorySink,
    path: str,
    body: dict[str, Any],
) -> None:
    config = gateway_config(entry(down, 0), entry(backup, 1))
    request_id = f"refused{path[1:]}"
    with GatewayServer(config, recorder=sink) as gw:
        streamed = post(gw.base_url, path, body, {"X-Request-Id": request_id})
    assert streamed.status == 200
    assert text_of(typed_events(streamed)) == ANSWER
    _, delivered = sink.edges(request_id)
    assert delivered.outcome is Outcome.FAILED_OVER


@pytest.mark.parametrize(
    ("path", "body", "error_type"),
    [("/responses", RESPONSES, "response.failed"), ("/messages", MESSAGES, "error")],
)
@pytest.mark.parametrize("script", ["stall", "overloaded"])
def test_a_stream_that_fails_mid_way_ends_with_one_error_in_its_own_shape(
    primary: TypedUpstream,
    backup: TypedUpstream,
    sink: MemorySink,
    path: str,
    body: dict[str, Any],
    error_type: str,
    script: str,
) -> None:
    # A typed stream has no fallback once the client had its events: not waited out here.
    config = gateway_config(
        entry(primary, 0), entry(backup, 1), failover={"wait_without_fallback": False}
    )
    request_id = f"{script}{path[1:]}"
    with GatewayServer(config, recorder=sink) as gw:
        streamed = post(gw.base_url, path, {**body, "script": script}, {"X-Request-Id": request_id})
    events = typed_events(streamed)
    assert events[-1]["type"] == error_type
    errors = [e for e in events if e["type"] in ("error", "response.failed")]
    assert 1 <= len(errors) <= 2  # Responses: error, then response.failed
    if path == "/responses":
        numbers = [e["sequence_number"] for e in events]
        assert numbers == sorted(set(numbers))  # on from the last the client got
    assert text_of(events) == "".join(WORDS[: 5 if script == "stall" else 3])
    _, down = sink.edges(request_id)
    assert down.outcome is Outcome.ERROR


def test_the_openai_sdk_reads_a_responses_stream_through_the_gateway(
    primary: TypedUpstream,
) -> None:
    with GatewayServer(gateway_config(entry(primary))) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
        deltas = [
            event.delta
            for event in client.responses.create(model="m", input="hi", stream=True)
            if event.type == "response.output_text.delta"
        ]
        with client.responses.stream(model="m", input="hi") as stream:
            final = stream.get_final_response()
        whole = client.responses.create(model="m", input="hi")
    assert "".join(deltas) == ANSWER
    assert final.output_text == ANSWER
    assert final.usage is not None
    assert final.usage.output_tokens == len(WORDS)
    assert whole.output_text == ANSWER


def test_the_anthropic_sdk_reads_a_messages_stream_through_the_gateway(
    primary: TypedUpstream,
) -> None:
    with GatewayServer(gateway_config(entry(primary))) as gw:
        client = anthropic.Anthropic(
            base_url=gw.base_url.removesuffix("/v1"), api_key="unused", max_retries=0
        )
        asked = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        with client.messages.stream(**asked) as stream:  # type: ignore[arg-type]
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        whole = client.messages.create(**asked)  # type: ignore[call-overload]
        with (
            pytest.raises(anthropic.APIStatusError, match="Overloaded"),
            client.messages.stream(**asked, extra_body={"script": "overloaded"}) as failing,  # type: ignore[arg-type]
        ):
            "".join(failing.text_stream)
    assert text == ANSWER
    assert final.usage.output_tokens == len(WORDS)
    assert final.stop_reason == "end_turn"
    assert whole.content[0].text == ANSWER  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/responses", {"model": "m", "stream": True}, "input"),
        ("/responses", {**RESPONSES, "max_output_tokens": 0}, "max_output_tokens"),
        ("/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        (
            "/messages",
            {**MESSAGES, "messages": [{"role": "system", "content": "x"}]},
            "messages.0.role",
        ),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(
    primary: TypedUpstream, path: str, body: dict[str, Any], param: str
) -> None:
    seen = len(primary.requests)
    with GatewayServer(gateway_config(entry(primary))) as gw:
        refused = post(gw.base_url, path, body)
    assert refused.status == 400
    assert refused.json()["error"]["param"] == param
    assert len(primary.requests) == seen  # nothing went upstream


@pytest.mark.parametrize(
    ("path", "body", "marker"),
    [("/responses", RESPONSES, b"output_text.delta"), ("/messages", MESSAGES, b"text_delta")],
)
def test_a_client_that_leaves_mid_stream_closes_the_upstream_stream(
    sink: MemorySink, path: str, body: dict[str, Any], marker: bytes
) -> None:
    with (
        TypedUpstream("leaving") as upstream,
        GatewayServer(gateway_config(entry(upstream)), recorder=sink) as gw,
    ):
        request_id = f"left{path[1:]}"
        sock = connect(gw.base_url)
        sock.sendall(
            raw_request(gw.base_url, path, {**body, "script": "stall"}, x_request_id=request_id)
        )
        assert marker in read_until(sock, marker, count=2)
        sock.close()
        wait_for(lambda: upstream.left_early or None, what="the upstream stream to be closed")
        _, down = sink.edges(request_id)
    assert down.outcome is Outcome.CANCELLED
