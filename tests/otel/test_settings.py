"""The standard OTEL_* environment, and the configuration over it."""

from __future__ import annotations

import pytest

from steadystream import ConfigError
from steadystream.otel import OtelSettings, resolve_settings


def test_off_without_an_endpoint_and_when_the_sdk_is_disabled() -> None:
    assert resolve_settings({}) is None
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}
    assert resolve_settings(env) is None
    assert resolve_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, enabled=False) is None


def test_the_environment_sets_everything() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=abc%3D1,other = two",
        "OTEL_SERVICE_NAME": "chat-gw",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.version=3",
    }
    settings = resolve_settings(env)
    assert settings is not None
    assert settings.endpoint == "http://collector:4317"
    assert settings.protocol == "grpc"
    assert settings.signal_endpoint("traces") == "http://collector:4317"
    assert dict(settings.headers) == {"x-honeycomb-team": "abc=1", "other": "two"}
    assert settings.service_name == "chat-gw"
    assert settings.resource == {
        "deployment.environment": "prod",
        "service.version": "3",
        "service.name": "chat-gw",
    }


def test_configuration_wins_over_the_environment_and_http_adds_the_signal_path() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    settings = resolve_settings(
        env, endpoint="http://file:4318/", protocol="http/protobuf", service_name="gw"
    )
    assert settings is not None
    assert settings.signal_endpoint("traces") == "http://file:4318/v1/traces"
    assert settings.signal_endpoint("metrics") == "http://file:4318/v1/metrics"
    assert settings.service_name == "gw"
    assert resolve_settings({}, default_service="steadystream-bench", endpoint="http://c:1") == (
        OtelSettings(
            endpoint="http://c:1",
            service_name="steadystream-bench",
            resource={"service.name": "steadystream-bench"},
        )
    )


def test_headers_never_show_in_repr_or_errors() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer sk-secret-123",
    }
    settings = resolve_settings(env)
    assert "sk-secret-123" not in repr(settings)
    env["OTEL_EXPORTER_OTLP_HEADERS"] = "authorization=ok,sk-secret-123"
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_HEADERS: member 2") as caught:
        resolve_settings(env)
    assert "sk-secret-123" not in str(caught.value)


@pytest.mark.parametrize(
    ("env", "kwargs", "message"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, {"endpoint": "http://c:1"}, "http/json"),
        ({}, {"enabled": True}, "no endpoint is set"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}, {}, "an http:// or https:// URL"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "=x"}, {"endpoint": "http://c:1"}, "OTEL_RESOURCE_ATTRIB"),
    ],
)
def test_bad_settings_name_what_is_wrong(
    env: dict[str, str], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_settings(env, **kwargs)  # type: ignore[arg-type]
