"""Upstream request bodies (continuations) and keys that never leak."""

from __future__ import annotations

import orjson
import pytest

from steadystream import ConfigError
from steadystream._exceptions import (
    UpstreamConnectError,
    UpstreamStatusError,
    UpstreamStreamError,
)
from steadystream.gateway.config import UpstreamConfig, config_from_mapping
from steadystream.gateway.failover import Action, Progress
from steadystream.gateway.refusal import upstream_refusal
from steadystream.gateway.requests import parse_request
from steadystream.gateway.upstreams import UpstreamPool, build_body

MESSAGES = [{"role": "user", "content": "Tell me"}]


def progress(*texts: str) -> Progress:
    done = Progress()
    for text in texts:
        done.commit(__import__("steadystream").EventKind.CONTENT, text)
    return done


def test_chat_continuation_with_vllm_flags() -> None:
    request = parse_request(
        orjson.dumps({"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 20}), "chat"
    )
    upstream = UpstreamConfig(name="b", base_url="http://h/v1", model_map={"m": "served-m"})
    body = build_body(request, upstream, Action.CONTINUE, progress("Once", " upon"))
    assert body["messages"] == [*MESSAGES, {"role": "assistant", "content": "Once upon"}]
    assert body["continue_final_message"] is True
    assert body["add_generation_prompt"] is False
    assert body["max_tokens"] == 18  # two tokens already delivered
    assert body["model"] == "served-m"
    assert request.body["messages"] == MESSAGES  # the client's body is not changed


def test_chat_continuation_prefix_style() -> None:
    request = parse_request(orjson.dumps({"model": "m", "messages": MESSAGES}), "chat")
    upstream = UpstreamConfig(name="b", base_url="http://h/v1", chat_continuation="prefix")
    body = build_body(request, upstream, Action.CONTINUE, progress("Hi"))
    assert body["messages"][-1] == {"role": "assistant", "content": "Hi", "prefix": True}
    assert "continue_final_message" not in body


def test_completion_continuation_appends_to_the_prompt() -> None:
    request = parse_request(
        orjson.dumps({"model": "m", "prompt": "Q:", "max_tokens": 5}), "completions"
    )
    upstream = UpstreamConfig(name="b", base_url="http://h/v1")
    body = build_body(request, upstream, Action.CONTINUE, progress(" A", " B", " C", " D", " E"))
    assert body["prompt"] == "Q: A B C D E"
    assert body["max_tokens"] == 1  # never below one
    listed = parse_request(orjson.dumps({"model": "m", "prompt": ["Q:"]}), "completions")
    assert build_body(listed, upstream, Action.CONTINUE, progress("x"))["prompt"] == ["Q:x"]


def test_retry_and_regenerate_send_the_original_request() -> None:
    request = parse_request(orjson.dumps({"model": "m", "messages": MESSAGES}), "chat")
    upstream = UpstreamConfig(name="b", base_url="http://h/v1")
    for action in (Action.RETRY, Action.REGENERATE):
        assert build_body(request, upstream, action, progress("x")) == request.body


def test_keys_are_redacted_and_never_in_repr() -> None:
    cfg = config_from_mapping(
        {"upstreams": [{"name": "a", "base_url": "http://h/v1", "api_key_env": "A_KEY"}]}
    )
    pool = UpstreamPool(cfg, None, {"A_KEY": "sk-very-secret"})
    assert pool.redact("Incorrect API key provided: sk-very-secret.") == (
        "Incorrect API key provided: ***."
    )
    assert "sk-very-secret" not in repr(pool)
    headers = pool._headers(cfg.upstreams[0], "rid", {})
    assert headers["Authorization"] == "Bearer sk-very-secret"
    assert headers["X-Request-Id"] == "rid"


def test_an_upstream_may_take_no_request_id() -> None:
    # llama-cpp-python's server answers 400 to an X-Request-Id that is not a UUID.
    cfg = config_from_mapping(
        {
            "upstreams": [
                {"name": "a", "base_url": "http://h/v1", "request_id_header": None},
                {"name": "b", "base_url": "http://h/v1", "request_id_header": "X-Trace"},
            ]
        }
    )
    pool = UpstreamPool(cfg, None, {})
    assert "X-Request-Id" not in pool._headers(cfg.upstreams[0], "rid", {})
    renamed = pool._headers(cfg.upstreams[1], "rid", {})
    assert renamed["X-Trace"] == "rid"
    assert "X-Request-Id" not in renamed


def test_a_request_id_header_must_be_a_header_name() -> None:
    with pytest.raises(ConfigError, match="request_id_header"):
        config_from_mapping(
            {"upstreams": [{"name": "a", "base_url": "http://h/v1", "request_id_header": "X Id"}]}
        )


@pytest.mark.parametrize(
    ("status", "passed_on"),
    [(400, 400), (429, 429), (503, 503), (599, 599), (101, 502), (204, 502), (304, 502),
     (600, 502), (999, 502)],
)  # fmt: skip
def test_an_upstream_status_goes_on_only_when_it_is_an_error(status: int, passed_on: int) -> None:
    # A 304 or a 2xx is no error a client could read (and must have no body); a status HTTP
    # has no line for would fail the server's own response.
    refused = upstream_refusal(UpstreamStatusError(status, "no"), str)
    assert refused.status == passed_on
    assert refused.code.startswith("upstream_")  # what the upstream said, still named


def test_an_upstream_reached_that_sent_no_answer_is_not_called_unreachable() -> None:
    # (A reset, bytes that are no HTTP, a whole body that cannot be streamed: "unreachable"
    # sends whoever reads it to check the network.)
    broke = upstream_refusal(UpstreamStreamError("answered whole and its body broke"), str)
    assert (broke.status, broke.code) == (502, "upstream_bad_response")
    gone = upstream_refusal(UpstreamConnectError("cannot connect"), str)
    assert (gone.status, gone.code) == (502, "upstream_unreachable")


@pytest.mark.parametrize("status", [400, 429, 503, 101, 204, 304])
def test_a_status_http_names_keeps_its_code(status: int) -> None:
    assert upstream_refusal(UpstreamStatusError(status, "no"), str).code == f"upstream_{status}"


@pytest.mark.parametrize(
    ("status", "code"), [(299, "upstream_2xx"), (499, "upstream_4xx"), (600, "upstream_6xx"),
                         (999, "upstream_9xx"), (418, "upstream_418"), (525, "upstream_5xx")],
)  # fmt: skip
def test_a_status_http_does_not_name_is_coded_by_its_class(status: int, code: str) -> None:
    # The code is a label of errors_total: an upstream that answers every number from 100
    # to 999 makes at most one code per class, past the statuses HTTP names.
    refused = upstream_refusal(UpstreamStatusError(status, "no"), str)
    assert refused.code == code
    assert str(status) in refused.message  # the number itself is still said


def test_a_redacted_message_is_one_line() -> None:
    # An upstream's words are logged: a line break in them would forge a log line.
    cfg = config_from_mapping({"upstreams": [{"name": "a", "base_url": "http://h/v1"}]})
    pool = UpstreamPool(cfg, None, {})
    assert pool.redact("down\nINFO request 2: ok\r\x1b[2J") == "down INFO request 2: ok [2J"


def test_a_redacted_message_is_cut_after_its_keys_are_hidden() -> None:
    cfg = config_from_mapping(
        {"upstreams": [{"name": "a", "base_url": "http://h/v1", "api_key_env": "A_KEY"}]}
    )
    pool = UpstreamPool(cfg, None, {"A_KEY": "sk-very-secret"})
    message = pool.redact("x" * 4090 + " sk-very-secret " + "y" * 100_000)
    assert len(message) < 4200
    assert message.endswith(f"({4090 + len(' *** ') + 100_000} characters)")
    assert "sk-" not in message
