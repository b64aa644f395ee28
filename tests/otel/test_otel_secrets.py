"""Bad OTel settings are refused before anything is sent, and no collector key or password
shows in an error, a log record or stderr (from an adversarial probe: a header value with a
newline, or a member the SDK could not parse, was logged with its value; an endpoint out of
range passed and every export failed; a password in an endpoint was echoed)."""

from __future__ import annotations

import logging
import os

import pytest

from steadystream import ConfigError, Where
from steadystream._validation import shown_url
from steadystream.bench.endpoint import Endpoint
from steadystream.bench.telemetry import bench_telemetry
from steadystream.gateway import config_from_mapping
from steadystream.otel import OtelSettings, gateway_stream, open_exporter, resolve_settings
from steadystream.otel.settings import check_endpoint
from tests.support.otel import CALL, edge
from tests.support.otel_receiver import Collector

SECRET = "SECRET-hny-0123456789"
UPSTREAMS = [{"name": "a", "base_url": "http://127.0.0.1:1/v1"}]
HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (f"x-honeycomb-team={SECRET}%0Ax", "member 1: the value has a control"),
        (f"a=b,x-honeycomb-team={SECRET}%0D%0AHost: evil", "member 2: the value has a control"),
        (f"x-team={SECRET}%00", "member 1: the value has a control"),
        (f"bad key={SECRET}", "member 1: the name is not an HTTP header name"),
        (f"ok=1,{SECRET}", "member 2 is not key=value"),
        (f"x:y={SECRET}", "member 1: the name is not an HTTP header name"),
    ],
)
def test_a_header_the_exporters_could_not_send_is_refused_by_its_number(
    headers: str, message: str
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", HEADERS: headers}
    with pytest.raises(ConfigError, match=message) as caught:
        resolve_settings(env)
    assert SECRET not in str(caught.value)
    assert HEADERS in str(caught.value)


def test_good_headers_pass_decoded() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        HEADERS: f"x-honeycomb-team={SECRET},Authorization=Basic%20dTpw, x-a = b%3Dc ",
    }
    settings = resolve_settings(env)
    assert settings is not None
    assert dict(settings.headers) == {
        "x-honeycomb-team": SECRET,
        "Authorization": "Basic dTpw",
        "x-a": "b=c",
    }


def test_grpc_refuses_a_header_name_that_is_no_metadata_key() -> None:
    with pytest.raises(ConfigError, match="member 1: gRPC metadata") as caught:
        OtelSettings(endpoint="http://c:4317", protocol="grpc", headers={"x!team": SECRET})
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:0", "port is out of range"),
        ("http://127.0.0.1:port", "port"),
        ("http://[::1", "unclosed"),
        ("http://127.0.0.1:4318/?q", "no query or fragment"),
        ("http://127.0.0.1:4318/#f", "no query or fragment"),
        ("http://127.0.0.1:4318 x", "space"),
        ("http://:4318", "no host"),
        ("collector:4318", "not an http:// or https:// URL"),
        ("grpc://collector:4317", "not an http:// or https:// URL"),
    ],
)
def test_an_endpoint_that_is_not_a_collectors_url_is_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_endpoint(url)
    with pytest.raises(ConfigError, match=message):
        resolve_settings({}, endpoint=url)
    with pytest.raises(ConfigError, match=f"otel.endpoint.*{message}"):
        config_from_mapping({"upstreams": UPSTREAMS, "otel": {"endpoint": url}})


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:4318", "https://otlp.example.com/otlp/", "http://[::1]:4318", "http://c"],
)
def test_a_collectors_url_passes(url: str) -> None:
    assert check_endpoint(url) == url


@pytest.mark.parametrize(
    "url",
    [
        f"http://u:{SECRET}@127.0.0.1:4392 x",
        f"http://u:{SECRET}@127.0.0.1:99999",
        f"http://u:{SECRET}/x@127.0.0.1:4318",
        f"http://u:{SECRET}@127.0.0.1:4318/?q",
    ],
)
def test_a_password_in_a_refused_endpoint_is_never_shown(url: str) -> None:
    for refuse in (
        lambda: resolve_settings({}, endpoint=url),
        lambda: resolve_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": url}),
        lambda: bench_telemetry(Endpoint(base_url="http://127.0.0.1:1/v1", model="m"), {}, url),
        lambda: config_from_mapping({"upstreams": UPSTREAMS, "otel": {"endpoint": url}}),
    ):
        with pytest.raises(ConfigError) as caught:
            refuse()
        assert SECRET not in str(caught.value)
        assert "***@" in str(caught.value)


def test_a_password_in_an_endpoint_is_kept_out_of_repr() -> None:
    url = f"https://user:{SECRET}@otlp.example.com"
    settings = OtelSettings(endpoint=url, headers={"x-team": SECRET})
    assert settings.endpoint == url  # sent as given
    assert SECRET not in repr(settings)
    assert shown_url(url) == "https://***@otlp.example.com"


@pytest.mark.integration
def test_the_sdk_never_sees_nor_logs_the_environments_headers(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The SDK's exporters read these variables from os.environ themselves and log an entry
    # they cannot parse with its value; the exporters get the checked headers only.
    monkeypatch.setenv(HEADERS, f"bad key={SECRET}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"x-leak={SECRET}%0Ax")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", f"x-leak={SECRET}")
    caplog.set_level(logging.DEBUG)
    up = edge(Where.GATEWAY_UPSTREAM, [100, 120, 140])
    down = edge(Where.GATEWAY_DOWNSTREAM, [101, 121, 141])
    with Collector("takes") as collector:
        settings = OtelSettings(endpoint=collector.url, headers={"x-honeycomb-team": "checked"})
        exporter = open_exporter(settings)
        exporter.export_stream(*gateway_stream(up, down, CALL))
        exporter.shutdown()
    assert collector.spans() == 1
    for request in collector.received:
        assert request.headers["x-honeycomb-team"] == "checked"
        assert "x-leak" not in request.headers
        assert SECRET not in repr(request.headers)
    out, err = capfd.readouterr()
    assert SECRET not in out + err
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert os.environ[HEADERS] == f"bad key={SECRET}"  # hidden only while they were built


@pytest.mark.integration
def test_a_refused_header_ends_the_bench_before_it_starts(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = Endpoint(base_url="http://127.0.0.1:1/v1", model="m")
    for headers in (f"x-honeycomb-team={SECRET}%0Ax", f"bad key={SECRET}"):
        with pytest.raises(ConfigError) as caught:
            bench_telemetry(endpoint, {HEADERS: headers}, "http://127.0.0.1:4318")
        assert SECRET not in str(caught.value)
    out, err = capfd.readouterr()
    assert SECRET not in out + err
    assert all(SECRET not in r.getMessage() for r in caplog.records)


@pytest.mark.integration
def test_a_signals_own_endpoint_and_headers_replace_the_common_ones_for_it() -> None:
    # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the traces' whole URL; the metrics keep the
    # common endpoint and headers.
    up = edge(Where.GATEWAY_UPSTREAM, [100, 120, 140])
    down = edge(Where.GATEWAY_DOWNSTREAM, [101, 121, 141])
    with Collector("takes") as collector:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            HEADERS: "x-team=common",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{collector.url}/own/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=for-traces",
        }
        settings = resolve_settings(env)
        assert settings is not None
        exporter = open_exporter(settings)
        exporter.export_stream(*gateway_stream(up, down, CALL))
        exporter.shutdown()
    sent = {(r.path, r.headers["x-team"]) for r in collector.received}
    assert sent == {("/own/v1/traces", "for-traces"), ("/v1/metrics", "common")}


def test_a_signals_own_settings_are_checked_as_the_common_ones() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_METRICS_HEADERS") as caught:
        resolve_settings({**env, "OTEL_EXPORTER_OTLP_METRICS_HEADERS": f"bad key={SECRET}"})
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError, match="OTLP endpoint") as caught:
        resolve_settings({**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"ftp://u:{SECRET}@c"})
    assert SECRET not in str(caught.value)
    # A signal's endpoint alone turns telemetry on for that signal only.
    alone = resolve_settings({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/t"})
    assert alone is not None
    assert (alone.traces, alone.metrics) == (True, False)
    assert alone.signal_endpoint("traces") == "http://c:4318/t"
    # An endpoint the configuration names wins over every one of the environment's.
    named = resolve_settings(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/t"}, endpoint="http://d:4318"
    )
    assert named is not None
    assert named.signal_endpoint("traces") == "http://d:4318/v1/traces"
