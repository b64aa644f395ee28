"""Configuration a probe found accepted or quoted that must not be: secrets in refused
values, keys holding keys, an empty bind address, headers that break every request, counts
past any real use, URLs the API path cannot follow, and durations written back without their
unit. Each error names the key; none quotes a secret."""

from __future__ import annotations

import traceback
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ValidationError

from steadystream import ConfigError
from steadystream._validation import Screen, as_written, describe_errors, shown_url
from steadystream.gateway import config as gateway_config
from steadystream.gateway.config import (
    GatewayConfig,
    UpstreamTimeouts,
    config_from_mapping,
    config_from_upstreams,
    with_server,
)

SECRET = "SECRETPW9"
UPSTREAM = {"name": "lab", "base_url": "http://127.0.0.1:8000/v1"}


def config(*, upstream: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    return {"upstreams": [{**UPSTREAM, **(upstream or {})}], **sections}


def refusal(data: dict[str, Any]) -> str:
    """The error ``data`` is refused with, and the whole traceback a caller who does not catch
    it would print (its cause included)."""
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(data)
    return "".join(traceback.format_exception(caught.value))


# -- 1: refused URLs and environment variable names quote no secret ------------------------


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (config(resume={"store": f"redis//:{SECRET}@10.0.0.1:6379/0"}), "resume.store"),
        (config(resume={"store": f"redis://:{SECRET}@10.0.0.1:99999/0"}), "resume.store"),
        (config(resume={"store": f"redis://:{SECRET}@10.0.0.1:6379/0 x"}), "resume.store"),
        (config(upstream={"base_url": f"htps://u:{SECRET}@h/v1"}), "upstreams.0.base_url"),
        (config(upstream={"base_url": f"http://u:{SECRET}@h:0/v1"}), "upstreams.0.base_url"),
        (config(upstream={"base_url": f"http://h/v1?token={SECRET}"}), "upstreams.0.base_url"),
        (config(otel={"endpoint": f"http://u:{SECRET}@h:99999"}), "otel.endpoint"),
        (config(otel={"endpoint": f"htp://u:{SECRET}@h:4318"}), "otel.endpoint"),
    ],
)
def test_a_refused_url_is_quoted_without_its_password_or_query(
    data: dict[str, Any], key: str
) -> None:
    """Failed before: ``got 'redis//:SECRETPW3@10.0.0.1:6379/0'`` and ``got
    'htps://u:SECRETPW4@h/v1'`` (describe_errors quotes the refused input)."""
    shown = refusal(data)
    assert f"key '{key}'" in shown
    assert SECRET not in shown
    assert "***" in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis//:pw@10.0.0.1:6379/0", "***@10.0.0.1:6379/0"),  # no scheme as such
        ("https://u:p@ss@h/v1", "https://***@h/v1"),  # an @ in the password
        ("http://u:pw/x@h:1", "http://***@h:1"),
        ("http://h/v1?token=x#f", "http://h/v1?***"),
        ("http://h:8000/v1", "http://h:8000/v1"),
        ("memory", "memory"),
    ],
)
def test_a_url_is_shown_without_userinfo_or_query(url: str, shown: str) -> None:
    assert shown_url(url) == shown


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (config(upstream={"api_key_env": f"sk-proj-{SECRET}"}), "upstreams.0.api_key_env"),
        (config(upstream={"api_key_env": [f"sk-{SECRET}"]}), "upstreams.0.api_key_env"),
        (
            config(tenants=[{"name": "t", "api_key_env": ["T_KEY", f"sk-{SECRET}"]}]),
            "tenants.0.api_key_env.1",
        ),
        (config(tenants=[{"name": "t", "api_key_env": f"sk-{SECRET}"}]), "tenants.0.api_key_env"),
        (config(glass={"secret_env": f"{SECRET}-long-random"}), "glass.secret_env"),
    ],
)
def test_a_key_where_its_variables_name_goes_is_refused_unquoted(
    data: dict[str, Any], key: str
) -> None:
    """Failed before: accepted, then ``the environment variable 'sk-proj-...' (the key of
    upstream 'a') is not set`` at start (and glass quoted it at load)."""
    shown = refusal(data)
    assert f"key '{key}'" in shown
    assert "environment variable name" in shown or "list of environment variable" in shown
    assert SECRET not in shown


def test_the_quick_starts_key_variable_is_checked_as_a_name() -> None:
    with pytest.raises(ConfigError, match=r"upstreams\.0\.api_key_env") as caught:
        config_from_upstreams(["http://127.0.0.1:1/v1"], api_key_env=f"sk-{SECRET}")
    assert SECRET not in "".join(traceback.format_exception(caught.value))
    named = config_from_upstreams(["http://127.0.0.1:1/v1"], api_key_env="_LAB_KEY2")
    assert named.upstreams[0].api_key_env == "_LAB_KEY2"


def test_a_section_refused_whole_is_not_quoted() -> None:
    """A model check's input is its whole section (here the whole file, header values and
    all): the message names the problem and quotes none of it."""
    upstream = {**UPSTREAM, "headers": {"X-Key": SECRET}}
    shown = refusal({"upstreams": [upstream, upstream]})
    assert "used twice" in shown
    assert SECRET not in shown


class _Guarded(BaseModel):
    kept: Annotated[str, Screen(lambda v: "wrong" if v != "ok" else None)] = "ok"
    shown: Annotated[str, Screen(lambda v: "wrong" if v != "ok" else None, shown=str.upper)] = "ok"


def test_a_screened_value_is_never_in_pydantics_message_nor_the_description() -> None:
    with pytest.raises(ValidationError) as caught:
        _Guarded.model_validate({"kept": SECRET.lower(), "shown": "abc"})
    described = describe_errors(caught.value, "test", _Guarded)
    assert SECRET.lower() not in str(caught.value) + described
    assert described == "test: key 'kept': wrong; key 'shown': wrong (got 'ABC')"


# -- 2: the bind address ------------------------------------------------------------------


@pytest.mark.parametrize("host", ["", " ", "127.0.0.1\n"])
def test_an_empty_bind_address_is_refused(host: str) -> None:
    """Failed before: ``host: ""`` bound every interface, and the banner said http://:PORT."""
    assert "key 'server.host'" in refusal(config(server={"host": host}))
    loaded = config_from_mapping(config())
    with pytest.raises(ConfigError, match=r"--host .*server\.host"):
        with_server(loaded, {"host": host})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "localhost", "10.0.0.5"])
def test_bind_addresses_pass(host: str) -> None:
    assert config_from_mapping(config(server={"host": host})).server.host == host


# -- 3 and 7: bounds ------------------------------------------------------------------------


def test_a_send_buffer_past_the_socket_option_is_refused() -> None:
    """Failed before: 4GiB was accepted, and the start died in setsockopt (a TypeError)."""
    assert "key 'limits.client_send_buffer'" in refusal(
        config(limits={"client_send_buffer": "4GiB"})
    )
    most = config_from_mapping(config(limits={"client_send_buffer": 2**31 - 1}))
    assert most.limits.client_send_buffer == 2**31 - 1


@pytest.mark.parametrize(
    ("section", "key", "most"),
    [
        ("limits", "max_model_labels", 100_000),
        ("limits", "buffer_events", 1_000_000),
        ("limits", "max_connections", 1_000_000),
        ("limits", "pacer_high_watermark", 1_000_000),
        ("limits", "max_body_bytes", 2**40),
        ("limits", "buffer_bytes", 2**40),
        ("limits", "max_event_bytes", 2**40),
        ("limits", "max_response_bytes", 2**40),
        ("resume", "max_streams", 10_000_000),
        ("resume", "max_stream_bytes", 2**40),
        ("recording", "rotate_streams", 100_000_000),
        ("recording", "keep_files", 1_000_000),
        ("glass", "max_events", 100_000_000),
        ("glass", "client_report_burst", 1_000_000),
        ("glass", "max_clients", 10_000_000),
        ("glass", "client_bytes_per_s", 2**40),
    ],
)
def test_counts_past_any_real_use_are_refused(section: str, key: str, most: int) -> None:
    """Failed before: ``max_model_labels: 1e16`` was accepted, and every worker died at start
    (an OverflowError reading the shared label file), forever."""
    assert f"key '{section}.{key}'" in refusal(config(**{section: {key: 10**16}}))
    assert f"key '{section}.{key}'" in refusal(config(**{section: {key: most + 1}}))
    if key != "pacer_high_watermark":  # it must stay above the low one, which it is
        loaded = config_from_mapping(config(**{section: {key: most}}))
        assert getattr(getattr(loaded, section), key) == most


def test_a_priority_past_any_real_use_is_refused() -> None:
    assert "key 'upstreams.0.priority'" in refusal(config(upstream={"priority": 10**16}))
    assert config_from_mapping(config(upstream={"priority": -5})).upstreams[0].priority == -5


# -- 4: header names and values -----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (
            config(upstream={"headers": {"X-A": f"{SECRET}\r\nX-Injected: 1"}}),
            "upstreams.0.headers.X-A",
        ),
        (config(upstream={"headers": {"X-A": f"{SECRET}\n"}}), "upstreams.0.headers.X-A"),
        (config(upstream={"headers": {"X-A": f"{SECRET}\x00"}}), "upstreams.0.headers.X-A"),
        (config(upstream={"headers": {"": SECRET}}), "upstreams.0.headers"),
        (config(upstream={"headers": {"X A": SECRET}}), "upstreams.0.headers"),
        (config(upstream={"headers": {"X-A:": SECRET}}), "upstreams.0.headers"),
        (config(upstream={"headers": f"Bearer {SECRET}"}), "upstreams.0.headers"),
        (config(upstream={"headers": {"Authorization": SECRET}}), "upstreams.0.headers"),
        (config(upstream={"forward_headers": ["x\r\ny"]}), "upstreams.0.forward_headers.0"),
        (config(upstream={"forward_headers": [""]}), "upstreams.0.forward_headers.0"),
        (config(upstream={"request_id_header": "X Id"}), "upstreams.0.request_id_header"),
        (config(cors={"expose_headers": ["a\r\nX-Injected: 1"]}), "cors.expose_headers.0"),
        (config(cors={"allow_headers": ["ok", ""]}), "cors.allow_headers.1"),
        (config(cors={"allow_headers": ["x y"]}), "cors.allow_headers.0"),
    ],
)
def test_headers_that_would_break_every_request_are_refused(data: dict[str, Any], key: str) -> None:
    """Failed before: accepted; then every request failed with a 500 (a ValueError in the
    HTTP client) or got no answer at all (a CORS header with a CR LF)."""
    shown = refusal(data)
    assert f"key '{key}" in shown
    assert SECRET not in shown  # a header's value may be a credential


def test_well_formed_headers_pass() -> None:
    loaded = config_from_mapping(
        config(
            upstream={
                "headers": {"X-Team": "a b\tc", "x!#$%&'*+.^_`|~": "v"},
                "forward_headers": ["X-Lab-Fault"],
            },
            cors={"allow_headers": ["content-type"], "expose_headers": ["x-request-id"]},
        )
    )
    assert loaded.upstreams[0].headers["X-Team"] == "a b\tc"


# -- 10: as_written ------------------------------------------------------------------------


def test_as_written_keeps_the_unit_of_an_optional_duration() -> None:
    """Failed before: ``first_token`` and ``stall`` (``Duration | None``) were written as
    bare numbers, which read again as seconds: a billion times longer."""
    timeouts = UpstreamTimeouts.model_validate({"first_token": "2s", "stall": "250ms"})
    assert as_written(timeouts)["stall"] == "250000000ns"
    assert UpstreamTimeouts.model_validate(as_written(timeouts)) == timeouts
    unset = UpstreamTimeouts()
    assert UpstreamTimeouts.model_validate(as_written(unset)) == unset


def _has_durations(model: type[BaseModel]) -> bool:
    return any(
        "_duration" in repr(field.annotation) + repr(field.metadata)
        for field in model.model_fields.values()
    )


def test_as_written_round_trips_every_model_with_durations() -> None:
    every = config_from_mapping(
        {
            "upstreams": [
                {**UPSTREAM, "timeouts": {"connect": "1500us", "first_token": 3, "stall": "7ms"}}
            ],
            "server": {"header_timeout": "3s", "body_timeout": 0.25},
            "watchdog": {"stall_timeout": "400ms", "give_up_timeout": 61},
            "limits": {"stuck_timeout": "2s", "keepalive_interval": "1500ms"},
            "glass": {"token_ttl": "90s"},
            "otel": {"metrics_interval": "250ms"},
            "resume": {"grace": 0, "ttl": "2m"},
        }
    )
    models: list[BaseModel] = [every, *every.upstreams, every.upstreams[0].timeouts]
    sections = (getattr(every, name) for name in GatewayConfig.model_fields)
    models += [section for section in sections if isinstance(section, BaseModel)]
    for model in models:
        assert type(model).model_validate(as_written(model)) == model, type(model).__name__
    # every model of the file that holds a duration was checked
    in_file = {
        model
        for name in gateway_config.__all__
        if isinstance(model := getattr(gateway_config, name), type)
        and issubclass(model, BaseModel)
        and _has_durations(model)
    }
    assert in_file <= {type(model) for model in models}
    assert UpstreamTimeouts in in_file


# -- 11: base URLs and statuses -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://", "no host"),
        ("http:///v1", "no host"),
        ("http://a b/v1", "space"),
        ("http://h/v1\n", "control"),
        ("http://h:1/v1?token=x", "no query or fragment"),
        ("http://h:1/v1?", "no query or fragment"),
        ("http://h:1/v1#x", "no query or fragment"),
        ("http://h:0/v1", "port"),
        ("http://h:99999/v1", "port"),
        ("http://h:port/v1", "port"),
        ("http://[::1/v1", "unclosed"),
        ("http:h/v1", "http://"),
        ("ftp://h/v1", "http://"),
    ],
)
def test_a_base_url_the_api_path_cannot_follow_is_refused(url: str, message: str) -> None:
    """Failed before: ``http://`` loaded as ``http:``, and a space or a query was kept (the
    gateway adds ``/chat/completions`` after the base URL: after a query, it is the query's)."""
    shown = refusal(config(upstream={"base_url": url}))
    assert "key 'upstreams.0.base_url'" in shown
    assert message in shown


@pytest.mark.parametrize(
    ("url", "held"),
    [
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("https://[::1]:8443/v1", "https://[::1]:8443/v1"),
        ("https://api.example.com", "https://api.example.com"),
    ],
)
def test_base_urls_pass(url: str, held: str) -> None:
    assert config_from_mapping(config(upstream={"base_url": url})).upstreams[0].base_url == held


@pytest.mark.parametrize("statuses", [[-1], [99999], [99, 500], [600]])
def test_a_retry_status_that_is_no_http_status_is_refused(statuses: list[int]) -> None:
    shown = refusal(config(failover={"retry_statuses": statuses}))
    assert "key 'failover.retry_statuses'" in shown
    assert "100 to 599" in shown


def test_retry_statuses_at_the_bounds_pass() -> None:
    loaded = config_from_mapping(config(failover={"retry_statuses": [100, 599]}))
    assert loaded.failover.retry_statuses == (100, 599)


def test_a_valid_store_url_passes() -> None:
    for store in ("memory", "redis://:pw@10.0.0.1:6379/0", "rediss://cache.example.com?ssl=1"):
        assert config_from_mapping(config(resume={"store": store})).resume.store == store


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (config(upstream={"api_key_env": "LAB_KEY\n"}), "upstreams.0.api_key_env"),
        (config(upstream={"headers": {"X-A\n": "v"}}), "upstreams.0.headers"),
        (config(upstream={"name": "lab\n"}), "upstreams.0.name"),
        (config(cors={"allow_origins": ["https://app.example.com\n"]}), "cors.allow_origins"),
    ],
)
def test_a_trailing_newline_is_no_part_of_a_name(data: dict[str, Any], key: str) -> None:
    """Failed before: ``$`` matches before a final newline, so these passed their patterns
    (a newline in a header name or a metric label breaks every answer that carries it)."""
    assert f"key '{key}" in refusal(data)
