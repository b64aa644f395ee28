"""The JSON calls passed through whole (embeddings, moderations, token counts): admitted as a
generation is, sent to the model's upstream with its own key, answered unchanged but for keys,
failed over on a retryable refusal, never recorded as streams; errors in the path's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from prometheus_client import CollectorRegistry

from steadystream.gateway import GatewayServer
from steadystream.gateway.passthrough import PASSTHROUGH_ROUTES
from tests.support.gateway import MemorySink, gateway_config, post
from tests.support.json_upstream import ANSWERS, JsonUpstream

pytestmark = pytest.mark.integration

ENV = {"UP_KEY": "sk-upstream-secret-0123456789", "WEB_KEY": "gw-tenant-secret-9876543210"}
GATEWAY_KEY = {"Authorization": f"Bearer {ENV['WEB_KEY']}"}
TENANTS = [{"name": "web", "api_key_env": ["WEB_KEY"]}]
BODIES: dict[str, dict[str, Any]] = {
    "/embeddings": {"model": "m", "input": ["naïve ✓", "two"], "dimensions": 3},
    "/moderations": {"model": "m", "input": "hello"},
    "/messages/count_tokens": {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "system": "be brief",
    },
    "/responses/input_tokens": {"model": "m", "input": "hi", "vendor_field": {"x": [1, None]}},
}
ANTHROPIC_PATHS = ("/messages/count_tokens",)


@pytest.fixture(scope="module")
def primary() -> Iterator[JsonUpstream]:
    with JsonUpstream("primary") as server:
        yield server


def entry(server: JsonUpstream, priority: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "name": server.name,
        "base_url": server.base_url,
        "priority": priority,
        "api_key_env": "UP_KEY",
        "models": ["m"],
        **extra,
    }


def serve(*upstreams: dict[str, Any], **sections: Any) -> GatewayServer:
    return GatewayServer(gateway_config(*upstreams, tenants=TENANTS, **sections), env=ENV)


def error_of(body: Any, path: str) -> tuple[str, str]:
    """(type, message) of an error body, checking it is in the path's shape."""
    if path in ANTHROPIC_PATHS:
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]["type"], body["error"]["message"]


@pytest.mark.parametrize("path", list(BODIES))
def test_the_body_and_the_answer_go_through_unchanged_and_no_stream_is_recorded(
    primary: JsonUpstream, sink: MemorySink, path: str
) -> None:
    registry = CollectorRegistry()
    with GatewayServer(
        gateway_config(entry(primary), tenants=TENANTS), env=ENV, recorder=sink, registry=registry
    ) as gw:
        answered = post(gw.base_url, path, BODIES[path], {**GATEWAY_KEY, "X-Request-Id": "pt-1"})
    got_path, _, got_body = primary.seen[-1]
    assert (got_path, got_body) == (f"/v1{path}", BODIES[path])
    assert answered.status == 200
    assert answered.body == primary.answers[-1] == orjson.dumps(ANSWERS[f"/v1{path}"])
    assert answered.headers["x-request-id"] == "pt-1"
    assert answered.headers["content-type"].startswith("application/json")
    assert sink.timelines == []  # not a stream
    labels = {
        "model": "m",
        "route": PASSTHROUGH_ROUTES[f"/v1{path}"],
        "tenant": "web",
        "upstream": "primary",
        "status": "200",
    }
    assert registry.get_sample_value("steadystream_passthrough_requests_total", labels) == 1
    assert not [m for m in registry.collect() if m.name == "steadystream_streams" and m.samples]


def test_no_key_reaches_the_upstream_but_its_own(primary: JsonUpstream) -> None:
    config = entry(primary, forward_headers=["anthropic-version"])
    headers = {**GATEWAY_KEY, "x-api-key": ENV["WEB_KEY"], "anthropic-version": "2023-06-01"}
    with serve(config) as gw:
        answered = post(
            gw.base_url, "/messages/count_tokens", BODIES["/messages/count_tokens"], headers
        )
    assert answered.status == 200
    _, seen, _ = primary.seen[-1]
    assert seen["authorization"] == f"Bearer {ENV['UP_KEY']}"
    assert seen["anthropic-version"] == "2023-06-01"  # forwarded, as configured
    assert not any(ENV["WEB_KEY"] in value for value in seen.values())
    assert seen["x-api-key"] == ENV["UP_KEY"]  # its own key, where Anthropic's API reads it


@pytest.mark.parametrize("path", ["/embeddings", "/messages/count_tokens"])
def test_an_oversize_body_gets_413_in_the_paths_shape(primary: JsonUpstream, path: str) -> None:
    seen = len(primary.seen)
    body = {**BODIES[path], "pad": "x" * 2048}
    with serve(entry(primary), limits={"max_body_bytes": 1024}) as gw:
        refused = post(gw.base_url, path, body, GATEWAY_KEY)
    assert refused.status == 413
    kind, message = error_of(refused.json(), path)
    assert kind == ("request_too_large" if path in ANTHROPIC_PATHS else "invalid_request_error")
    assert "1024 bytes" in message
    assert len(primary.seen) == seen  # nothing went upstream


def test_an_upstream_that_echoes_its_key_has_it_scrubbed(primary: JsonUpstream) -> None:
    with serve(entry(primary)) as gw:
        body = {**BODIES["/embeddings"], "script": "echo-key"}
        answered = post(gw.base_url, "/embeddings", body, GATEWAY_KEY)
    assert answered.status == 200
    assert ENV["UP_KEY"].encode() not in answered.body
    assert ENV["UP_KEY"][:8].encode() not in answered.body
    assert answered.json()["note"] == "you sent Bearer ***"


@pytest.mark.parametrize(("path", "shape"), [("/foo", "openai"), ("/messages/foo", "anthropic")])
def test_an_unknown_v1_path_still_gets_the_json_404(
    primary: JsonUpstream, path: str, shape: str
) -> None:
    with serve(entry(primary)) as gw:
        refused = post(gw.base_url, path, BODIES["/embeddings"], GATEWAY_KEY)
    assert refused.status == 404
    body = refused.json()
    if shape == "openai":
        assert body["error"]["code"] == "not_found"
    else:
        assert body == {
            "type": "error",
            "error": {"type": "not_found_error", "message": f"no such route: POST /v1{path}"},
        }


@pytest.mark.parametrize("path", ["/embeddings", "/messages/count_tokens"])
def test_the_gateway_key_the_model_and_its_upstream_are_checked_first(
    primary: JsonUpstream, path: str
) -> None:
    seen = len(primary.seen)
    with serve(entry(primary)) as gw:
        keyless = post(gw.base_url, path, BODIES[path])
        modelless = post(gw.base_url, path, {"input": "x"}, GATEWAY_KEY)
        unserved = post(gw.base_url, path, {**BODIES[path], "model": "other"}, GATEWAY_KEY)
    assert (keyless.status, modelless.status, unserved.status) == (401, 400, 404)
    assert error_of(modelless.json(), path)[1].startswith("model:")
    assert error_of(unserved.json(), path)[1].startswith("model: 'other' is not served")
    error_of(keyless.json(), path)
    assert len(primary.seen) == seen


def test_a_retryable_refusal_goes_to_the_next_upstream(primary: JsonUpstream) -> None:
    registry = CollectorRegistry()
    with JsonUpstream("busy", refuse=503) as busy:
        config = gateway_config(entry(busy, 0), entry(primary, 1), tenants=TENANTS)
        with GatewayServer(config, env=ENV, registry=registry) as gw:
            answered = post(
                gw.base_url,
                "/embeddings",
                BODIES["/embeddings"],
                {**GATEWAY_KEY, "X-Request-Id": "fo"},
            )
        assert len(busy.seen) == 1
    assert answered.status == 200
    assert answered.json() == ANSWERS["/v1/embeddings"]
    assert primary.seen[-1][1]["x-request-id"] == "fo.f1"  # the later attempt's own id
    failed = {"route": "embeddings", "upstream": "busy"}
    assert registry.get_sample_value("steadystream_passthrough_failovers_total", failed) == 1


def test_a_refusal_that_is_the_clients_is_passed_on_not_retried() -> None:
    with JsonUpstream("a") as first, JsonUpstream("b") as second:
        with serve(entry(first, 0), entry(second, 1)) as gw:
            body = {**BODIES["/messages/count_tokens"], "script": "status", "status": 400}
            refused = post(gw.base_url, "/messages/count_tokens", body, GATEWAY_KEY)
        assert (len(first.seen), len(second.seen)) == (1, 0)
    assert refused.status == 400
    kind, message = error_of(refused.json(), "/messages/count_tokens")
    assert kind == "invalid_request_error"
    assert "refused with 400" in message


def test_an_answer_past_the_response_limit_is_a_502(primary: JsonUpstream) -> None:
    with serve(entry(primary), limits={"max_response_bytes": 1024}) as gw:
        body = {**BODIES["/embeddings"], "script": "big", "size": 4096}
        refused = post(gw.base_url, "/embeddings", body, GATEWAY_KEY)
    assert refused.status == 502
    assert refused.json()["error"]["code"] == "upstream_response_too_large"


def test_the_official_sdks_read_the_answers_and_the_refusals(primary: JsonUpstream) -> None:
    asked: Any = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    too_many = {"script": "status", "status": 429}
    with (
        serve(entry(primary)) as gw,
        openai.OpenAI(base_url=gw.base_url, api_key=ENV["WEB_KEY"], max_retries=0) as client,
        anthropic.Anthropic(
            base_url=gw.base_url.removesuffix("/v1"),
            api_key=None,
            auth_token=ENV["WEB_KEY"],
            max_retries=0,
        ) as claude,
    ):
        embedded = client.embeddings.create(model="m", input="hi", encoding_format="float")
        moderated = client.moderations.create(model="m", input="hi")
        counted = client.responses.input_tokens.count(model="m", input="hi")
        tokens = claude.messages.count_tokens(**asked)
        with pytest.raises(anthropic.RateLimitError) as limited:
            claude.messages.count_tokens(**asked, extra_body=too_many)
        with pytest.raises(openai.RateLimitError) as also_limited:
            client.embeddings.create(model="m", input="hi", extra_body=too_many)
    assert embedded.data[0].embedding == [0.25, -1.5, 3e-05]
    assert moderated.results[0].flagged is False
    assert counted.input_tokens == 7
    assert tokens.input_tokens == 12
    assert limited.value.type == "rate_limit_error"
    assert limited.value.response.headers["retry-after"] == "7"
    assert "refused with 429" in str(limited.value.api_message)
    assert also_limited.value.code == "upstream_429"


def test_a_model_an_upstream_served_through_a_passthrough_gets_its_label(
    primary: JsonUpstream,
) -> None:
    # An upstream with no models list answers any name: an embeddings-only model it served
    # is labelled as a chat model it served would be (limits.max_model_labels), not 'other'.
    registry = CollectorRegistry()
    config = gateway_config(entry(primary, models=[]), tenants=TENANTS)
    with GatewayServer(config, env=ENV, registry=registry) as gw:
        for _ in range(2):
            body = {**BODIES["/embeddings"], "model": "embed-only"}
            assert post(gw.base_url, "/embeddings", body, GATEWAY_KEY).status == 200
    labels = {
        "route": PASSTHROUGH_ROUTES["/v1/embeddings"],
        "tenant": "web",
        "upstream": "primary",
        "status": "200",
    }
    named = registry.get_sample_value(
        "steadystream_passthrough_requests_total", {**labels, "model": "embed-only"}
    )
    assert named == 2  # (served, then counted: the first by its name too)
