"""The endpoint: request bodies for chat and completions, headers, and what may be shown."""

from __future__ import annotations

import orjson
import pytest

from steadystream import SpecError
from steadystream.bench.endpoint import (
    ANTHROPIC_VERSION,
    MESSAGES_MAX_TOKENS,
    Endpoint,
    headers_from,
    parse_header,
    redact,
)
from steadystream.bench.workload import RequestSpec

SPEC = RequestSpec(0, ({"role": "system", "content": "a"}, {"role": "user", "content": "b"}), 32, 2)


def test_chat_body_carries_messages_and_usage_options() -> None:
    endpoint = Endpoint("http://127.0.0.1:8000/v1/", "m")
    assert endpoint.url == "http://127.0.0.1:8000/v1/chat/completions"
    body = orjson.loads(endpoint.body(SPEC, 2))
    assert body["messages"][1] == {"role": "user", "content": "b"}
    assert body["stream"] is True
    assert body["max_tokens"] == 32
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert orjson.loads(endpoint.body(SPEC, 1))["stream_options"] == {"include_usage": True}
    assert "stream_options" not in orjson.loads(endpoint.body(SPEC, 0))


def test_completions_body_flattens_the_prompt() -> None:
    endpoint = Endpoint("http://h:1/v1", "m", kind="completions", ignore_eos=True)
    assert endpoint.url == "http://h:1/v1/completions"
    body = orjson.loads(endpoint.body(SPEC, 0))
    assert body["prompt"] == "a\n\nb"
    assert "messages" not in body
    assert body["ignore_eos"] is True


def test_max_tokens_is_what_the_body_asks_for() -> None:
    assert Endpoint("http://h:1/v1", "m").max_tokens(SPEC) == 32
    override = Endpoint("http://h:1/v1", "m", extra_body={"max_completion_tokens": 7})
    assert override.max_tokens(SPEC) == 7  # --extra-body has the last word, as in the body
    assert orjson.loads(override.body(SPEC, 0))["max_completion_tokens"] == 7
    nonsense = Endpoint("http://h:1/v1", "m", extra_body={"max_tokens": "lots"})
    assert nonsense.max_tokens(SPEC) is None  # nothing to count by
    unlimited = RequestSpec(0, SPEC.messages, None, 2)
    assert Endpoint("http://h:1/v1", "m").max_tokens(unlimited) is None


def test_usage_mode_sets_the_first_level() -> None:
    assert Endpoint("http://h/v1", "m").first_usage_level == 2
    assert Endpoint("http://h/v1", "m", usage="on").first_usage_level == 1
    assert Endpoint("http://h/v1", "m", usage="off").first_usage_level == 0


def test_the_api_key_is_sent_but_never_shown() -> None:
    endpoint = Endpoint(
        "http://h/v1", "m", api_key="sk-SECRET", headers=headers_from(["X-Api-Key: k2", "X-T: 1"])
    )
    sent = endpoint.request_headers("r1")
    assert sent["Authorization"] == "Bearer sk-SECRET"
    assert sent["X-Request-Id"] == "r1"
    assert sent["X-Api-Key"] == "k2"
    shown = " ".join(endpoint.shown_headers())
    assert "SECRET" not in shown
    assert "k2" not in shown
    assert "X-T: 1" in shown
    assert "SECRET" not in repr(endpoint)


def test_redaction_and_header_parsing() -> None:
    assert redact("Authorization: Bearer x") == "Authorization: ***"
    assert redact("Cookie: a=b") == "Cookie: ***"
    assert redact("X-Route: blue") == "X-Route: blue"
    assert parse_header("X-Route:  blue ") == ("X-Route", "blue")
    with pytest.raises(SpecError) as info:
        parse_header("Authorization Bearer sk-LEAK")
    assert "LEAK" not in str(info.value)
    with pytest.raises(SpecError, match="X-Route blue"):
        parse_header("X-Route blue")
    with pytest.raises(SpecError, match="X-Request-Id"):
        Endpoint("http://h/v1", "m", headers=(("X-Request-Id", "mine"),))


@pytest.mark.parametrize("url", ["127.0.0.1:8000/v1", "ftp://h/v1", "http:///v1", ""])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(SpecError, match=r"URL|cannot read"):
        Endpoint(url, "m")


def test_bad_options_are_refused() -> None:
    with pytest.raises(SpecError, match="--endpoint"):
        Endpoint("http://h/v1", "m", kind="embeddings")
    with pytest.raises(SpecError, match="--usage"):
        Endpoint("http://h/v1", "m", usage="sometimes")


def test_the_request_id_header_can_be_renamed_or_left_out() -> None:
    # llama-cpp-python refuses an X-Request-Id that is not a UUID: bench can send none.
    assert "X-Request-Id" not in Endpoint(
        "http://h/v1", "m", request_id_header=None
    ).request_headers("r1")
    renamed = Endpoint("http://h/v1", "m", request_id_header="X-Correlation-Id")
    sent = renamed.request_headers("r1")
    assert sent["X-Correlation-Id"] == "r1"
    assert "X-Request-Id" not in sent
    # A --header may then set X-Request-Id itself, but not the renamed one.
    mine = Endpoint("http://h/v1", "m", request_id_header=None, headers=(("X-Request-Id", "u"),))
    assert mine.request_headers("r1")["X-Request-Id"] == "u"
    with pytest.raises(SpecError, match="X-Correlation-Id"):
        Endpoint(
            "http://h/v1", "m", request_id_header="X-Correlation-Id",
            headers=(("x-correlation-id", "u"),),
        )  # fmt: skip
    with pytest.raises(SpecError, match="not a header name"):
        Endpoint("http://h/v1", "m", request_id_header="X Request")


def test_a_responses_body_is_the_conversation_as_input_with_its_own_limit() -> None:
    endpoint = Endpoint("http://h:1/v1", "m", kind="responses", ignore_eos=True)
    assert endpoint.url == "http://h:1/v1/responses"
    body = orjson.loads(endpoint.body(SPEC, 2))
    assert body["input"] == [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]
    assert body["max_output_tokens"] == 32
    # Usage is always given at the end: nothing is asked, and nothing steps down.
    assert not {"stream_options", "max_tokens", "messages", "ignore_eos"} & set(body)
    assert not endpoint.steps_down
    assert endpoint.max_tokens(SPEC) == 32
    headers = endpoint.request_headers("r1")
    assert "anthropic-version" not in headers


def test_a_messages_body_takes_the_system_text_apart_and_always_a_limit() -> None:
    endpoint = Endpoint("http://h:1/v1", "m", kind="messages", api_key="sk-secret")
    assert endpoint.url == "http://h:1/v1/messages"
    body = orjson.loads(endpoint.body(SPEC, 2))
    assert body["system"] == "a"
    assert body["messages"] == [{"role": "user", "content": "b"}]
    assert body["max_tokens"] == 32
    unlimited = RequestSpec(0, ({"role": "user", "content": "b"},), None, 1)
    assert orjson.loads(endpoint.body(unlimited, 0))["max_tokens"] == MESSAGES_MAX_TOKENS
    assert endpoint.max_tokens(unlimited) == MESSAGES_MAX_TOKENS
    headers = endpoint.request_headers("r1")
    assert headers["x-api-key"] == "sk-secret"
    assert "Authorization" not in headers
    assert headers["anthropic-version"] == ANTHROPIC_VERSION
    assert endpoint.shown_headers() == ["x-api-key: ***"]
    assert "sk-secret" not in repr(endpoint)


def test_an_unknown_api_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(SpecError, match="chat, completions, responses, messages"):
        Endpoint("http://h:1/v1", "m", kind="soap")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1?x=1", "http://127.0.0.1:8000/v1?", "http://h/v1#top"]
)
def test_a_base_with_a_query_or_fragment_is_refused(url: str) -> None:
    # The API's path goes after the base's: after a query it would be the query's.
    with pytest.raises(SpecError, match="no query or fragment"):
        Endpoint(url, "m")


def test_a_refused_url_never_says_its_password() -> None:
    with pytest.raises(SpecError) as info:
        Endpoint("ftp://user:hunter2@h/v1?key=sk-live", "m")
    assert "hunter2" not in str(info.value)
    assert "sk-live" not in str(info.value)
