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
from anthropic.types import ErrorResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from steadystream import ConfigError, EventKind, Outcome
from steadystream.gateway import GatewayServer
from steadystream.protocol import new_decoder
from tests.support.gateway import (
    MemorySink,
    Streamed,
    connect,
    gateway_config,
    get,
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
        assert numbers == list(range(len(numbers)))  # on from the last the client got, no gap
        cause = {"stall": "upstream_stall", "overloaded": "upstream_error"}[script]
        assert errors[0]["code"] == cause
        # The gateway's own events as the SDK's types have them; the failed response is the
        # one created (the scripted upstream's own are not whole: not checked).
        for event in errors:
            TypeAdapter(ResponseStreamEvent).validate_python(event)
        assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    else:
        for event in errors:
            ErrorResponse.model_validate(event, strict=False)
    assert text_of(events) == "".join(WORDS[: 5 if script == "stall" else 3])
    _, down = sink.edges(request_id)
    assert down.outcome is Outcome.ERROR


def test_the_openai_sdk_reads_a_responses_stream_through_the_gateway(
    primary: TypedUpstream,
) -> None:
    with (
        GatewayServer(gateway_config(entry(primary))) as gw,
        openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0) as client,
    ):
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
    with (
        GatewayServer(gateway_config(entry(primary))) as gw,
        anthropic.Anthropic(
            base_url=gw.base_url.removesuffix("/v1"), api_key="unused", max_retries=0
        ) as client,
    ):
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
        (  # (a list where a role goes: it was a 500, found by an adversarial review)
            "/messages",
            {**MESSAGES, "messages": [{"role": ["user"], "content": "x"}]},
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
    error = refused.json()
    if path == "/responses":  # OpenAI's shape
        assert error["error"]["param"] == param
    else:  # Anthropic's: no param, the field first in the message
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["message"].startswith(f"{param}: ")
        assert set(error["error"]) == {"type", "message"}
    assert len(primary.requests) == seen  # nothing went upstream


def test_every_refusal_on_messages_is_in_anthropics_shape_for_its_sdk(
    primary: TypedUpstream, down: TypedUpstream
) -> None:
    env = {"WEB_KEY": "gw-web-key-0123456789"}
    config = gateway_config(
        entry(primary, models=["m", "small"]),
        {"name": "gone", "base_url": "http://127.0.0.1:9/v1", "models": ["unreachable"]},
        entry(down, models=["busy"]),
        tenants=[
            {
                "name": "web",
                "api_key_env": ["WEB_KEY"],
                "models": ["m", "busy", "unreachable", "nowhere"],
            }
        ],
        limits={"max_body_bytes": 2048},
    )
    asked: Any = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    cases: list[tuple[type[anthropic.APIStatusError], str, Any]] = [
        (anthropic.BadRequestError, "invalid_request_error", {**asked, "max_tokens": 0}),
        (anthropic.PermissionDeniedError, "permission_error", {**asked, "model": "small"}),
        (anthropic.NotFoundError, "not_found_error", {**asked, "model": "nowhere"}),
        (anthropic.ContentTooLargeError, "request_too_large", {**asked, "system": "x" * 4096}),
        (anthropic.OverloadedError, "overloaded_error", {**asked, "model": "busy"}),
        (anthropic.InternalServerError, "api_error", {**asked, "model": "unreachable"}),
    ]
    raised = []
    with GatewayServer(config, env=env) as gw:
        base = gw.base_url.removesuffix("/v1")
        with (
            anthropic.Anthropic(
                base_url=base, api_key=None, auth_token=env["WEB_KEY"], max_retries=0
            ) as sdk,
            anthropic.Anthropic(
                base_url=base, api_key=None, auth_token="wrong", max_retries=0
            ) as stranger,
        ):
            for kind, error_type, body in cases:
                with pytest.raises(kind) as caught:
                    sdk.messages.create(**body)
                error = caught.value
                raised.append((error.status_code, error.api_message))
                assert error.type == error_type
            with pytest.raises(anthropic.AuthenticationError) as unknown:
                stranger.messages.create(**asked, stream=True)
            with pytest.raises(anthropic.BadRequestError) as streamed:
                sdk.messages.create(**{**asked, "max_tokens": None}, stream=True)
            with pytest.raises(anthropic.OverloadedError) as refused_stream:
                sdk.messages.create(**{**asked, "model": "busy"}, stream=True)
        status, answer = get(gw.base_url, "/v1/messages", {"Authorization": "Bearer x"})
    assert [status for status, _ in raised] == [400, 403, 404, 413, 529, 502]
    assert raised[0][1] == "max_tokens: required, an integer of at least 1"
    assert str(raised[2][1]).startswith("model: 'nowhere' is not served")
    assert unknown.value.type == "authentication_error"
    assert unknown.value.api_message == "unknown gateway key"
    assert str(streamed.value.api_message).startswith("max_tokens: ")
    assert refused_stream.value.type == "overloaded_error"  # the upstream's 529, streamed
    assert "busy" in str(refused_stream.value.api_message)
    assert status == 405
    assert orjson.loads(answer)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("path", "body", "marker"),
    [("/responses", RESPONSES, b"output_text.delta"), ("/messages", MESSAGES, b"text_delta")],
)
def test_a_client_that_leaves_mid_stream_closes_the_upstream_stream(
    sink: MemorySink, path: str, body: dict[str, Any], marker: bytes
) -> None:
    with (
        TypedUpstream("leaving") as upstream,
        # (no grace: the generation is cancelled as the client leaves, gateway/resume)
        GatewayServer(gateway_config(entry(upstream), resume={"grace": 0}), recorder=sink) as gw,
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


def test_a_messages_client_brings_its_gateway_key_where_the_anthropic_sdk_puts_it(
    primary: TypedUpstream,
) -> None:
    """x-api-key is the gateway key on Anthropic's paths; upstream, the upstream's own key
    goes in both headers, with the client's anthropic-version, and the client's key never."""
    config = gateway_config(
        entry(primary, api_key_env="UPSTREAM_KEY"),
        tenants=[{"name": "claude-users", "api_key_env": ["GATEWAY_KEY"]}],
    )
    env = {"UPSTREAM_KEY": "sk-upstream-0123456789", "GATEWAY_KEY": "gw-client-9876543210"}
    with GatewayServer(config, env=env) as gw:
        root = gw.base_url.removesuffix("/v1")
        client = anthropic.Anthropic(base_url=root, api_key=env["GATEWAY_KEY"], max_retries=0)
        stranger = anthropic.Anthropic(base_url=root, api_key="gw-wrong-key", max_retries=0)
        asked = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        with client:
            answer = client.messages.create(**asked)  # type: ignore[call-overload]
        with stranger, pytest.raises(anthropic.AuthenticationError):
            stranger.messages.create(**asked)  # type: ignore[call-overload]
        sdk_sent = primary.headers[-1]
        bare = post(gw.base_url, "/messages", MESSAGES, {"x-api-key": env["GATEWAY_KEY"]})
        bare_sent = primary.headers[-1]
    assert answer.content[0].text == ANSWER  # type: ignore[union-attr]
    assert bare.status == 200
    for sent in (sdk_sent, bare_sent):
        assert sent["x-api-key"] == env["UPSTREAM_KEY"]
        assert sent["authorization"] == f"Bearer {env['UPSTREAM_KEY']}"
    assert sdk_sent["anthropic-version"]  # the SDK's own, passed on
    assert bare_sent["anthropic-version"] == "2023-06-01"  # a client that sent none
    assert env["GATEWAY_KEY"] not in repr(primary.headers)


def test_x_api_key_is_the_gateways_own_header() -> None:
    with pytest.raises(ConfigError, match="x-api-key"):
        gateway_config(
            {"name": "u", "base_url": "http://127.0.0.1:9/v1", "forward_headers": ["x-api-key"]}
        )


def test_a_responses_stream_that_never_began_still_ends_as_the_sdk_expects(
    primary: TypedUpstream, sink: MemorySink
) -> None:
    """An upstream that answers 200 and sends nothing, with nowhere to fail over: the client
    gets response.created, error and response.failed, one response, numbered from 0."""
    config = gateway_config(entry(primary), failover={"wait_without_fallback": False})
    with GatewayServer(config, recorder=sink) as gw:
        body = {**RESPONSES, "script": "silent"}
        streamed = post(gw.base_url, "/responses", body, {"X-Request-Id": "never-began"})
    events = typed_events(streamed)
    assert [e["type"] for e in events] == ["response.created", "error", "response.failed"]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    for event in events:
        TypeAdapter(ResponseStreamEvent).validate_python(event)
    assert events[0]["response"]["id"] == events[2]["response"]["id"] == "resp_never-began"
    _, down = sink.edges("never-began")
    assert down.outcome is Outcome.ERROR
