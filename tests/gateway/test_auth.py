"""Gateway keys to tenants."""

from __future__ import annotations

import pytest

from steadystream import ConfigError
from steadystream.gateway.auth import OPEN_TENANT, Authenticator, AuthError
from steadystream.gateway.config import config_from_mapping

UPSTREAMS = [{"name": "lab", "base_url": "http://127.0.0.1:1/v1"}]


def authenticator() -> Authenticator:
    cfg = config_from_mapping(
        {
            "upstreams": UPSTREAMS,
            "tenants": [
                {"name": "web", "api_key_env": ["WEB_KEY", "WEB_KEY_2"], "models": ["small"]},
                {"name": "batch", "api_key_env": ["BATCH_KEY"], "pacer": "leaky"},
            ],
        }
    )
    env = {"WEB_KEY": "k-web", "WEB_KEY_2": "k-web-2", "BATCH_KEY": "k-batch"}
    return Authenticator.from_config(cfg, env)


def test_keys_map_to_tenants() -> None:
    auth = authenticator()
    assert auth.tenant_for("Bearer k-web").name == "web"
    assert auth.tenant_for("bearer k-web-2").name == "web"
    batch = auth.tenant_for("Bearer k-batch")
    assert (batch.name, batch.pacer) == ("batch", "leaky")
    assert "k-web" not in repr(auth)


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "missing_api_key"),
        ("Bearer nope", "invalid_api_key"),
        ("Basic k-web", "invalid_api_key"),
    ],
)
def test_missing_or_unknown_keys_are_401(header: str | None, code: str) -> None:
    with pytest.raises(AuthError) as caught:
        authenticator().tenant_for(header)
    assert (caught.value.status, caught.value.code) == (401, code)


def test_models_a_tenant_may_not_use_are_403() -> None:
    auth = authenticator()
    web = auth.tenant_for("Bearer k-web")
    auth.check_model(web, "small")
    with pytest.raises(AuthError) as caught:
        auth.check_model(web, "large")
    assert caught.value.status == 403
    assert "small" in caught.value.message


def test_no_tenants_means_open() -> None:
    auth = Authenticator.from_config(config_from_mapping({"upstreams": UPSTREAMS}), {})
    assert auth.open
    assert auth.tenant_for(None) is OPEN_TENANT
    assert OPEN_TENANT.may_use("anything")


def test_a_key_shared_by_two_tenants_is_refused() -> None:
    cfg = config_from_mapping(
        {
            "upstreams": UPSTREAMS,
            "tenants": [
                {"name": "a", "api_key_env": ["A"]},
                {"name": "b", "api_key_env": ["B"]},
            ],
        }
    )
    with pytest.raises(ConfigError, match="already uses"):
        Authenticator.from_config(cfg, {"A": "same", "B": "same"})
