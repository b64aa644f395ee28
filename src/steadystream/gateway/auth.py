"""Gateway keys to tenants: who is calling, and what they may use.

A client sends its gateway key as ``Authorization: Bearer KEY`` (what the ``openai`` SDK
does with ``api_key=``). Keys live in environment variables named by the configuration, are
read once when the app is built, and are compared in constant time. With no tenants
configured the gateway is open: every request belongs to the tenant ``default``, which may
use every model (docs/gateway.md says so, and binding to loopback is the default for that
reason).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from steadystream._api_errors import ApiError
from steadystream._exceptions import ConfigError
from steadystream.gateway.config import GatewayConfig

__all__ = ["OPEN_TENANT", "AuthError", "Authenticator", "Tenant", "gateway_key"]


@dataclass(frozen=True, slots=True)
class Tenant:
    """A caller: its name (a metric label), allowed models (empty: all), default pacer."""

    name: str
    models: frozenset[str] = frozenset()
    pacer: str | None = None

    def may_use(self, model: str) -> bool:
        return not self.models or model in self.models


OPEN_TENANT = Tenant("default")
"""The tenant of every request when no tenants are configured."""


class AuthError(ApiError):
    """A request that cannot be served as asked: 401 (who are you) or 403 (not allowed).

    An :class:`ApiError` like every other refusal, so callers catch one type.
    """

    def __init__(self, status: int, message: str, code: str) -> None:
        kind = "authentication_error" if status == 401 else "permission_error"
        super().__init__(status, message, type=kind, code=code)


class Authenticator:
    """Maps the ``Authorization`` header of a request to its :class:`Tenant`."""

    __slots__ = ("_keys", "open")

    def __init__(self, keys: Mapping[str, Tenant]) -> None:
        self._keys = [(key.encode(), tenant) for key, tenant in keys.items()]
        self.open = not self._keys

    def __repr__(self) -> str:  # never the keys
        return f"<Authenticator tenants={len({t.name for _, t in self._keys})} open={self.open}>"

    @classmethod
    def from_config(cls, config: GatewayConfig, env: Mapping[str, str]) -> Authenticator:
        """Read every tenant's keys from ``env``; a missing variable is a :class:`ConfigError`."""
        keys: dict[str, Tenant] = {}
        for index, spec in enumerate(config.tenants):
            tenant = Tenant(spec.name, frozenset(spec.models), spec.pacer)
            if not spec.api_key_env:
                raise ConfigError(
                    f"key 'tenants.{index}.api_key_env': tenant {spec.name!r} needs at least "
                    "one environment variable holding its gateway key"
                )
            for name in spec.api_key_env:
                key = env.get(name)
                if not key:
                    raise ConfigError(
                        f"key 'tenants.{index}.api_key_env': the environment variable {name!r} "
                        f"(a gateway key of tenant {spec.name!r}) is not set"
                    )
                if key in keys:
                    raise ConfigError(
                        f"key 'tenants.{index}.api_key_env': {name!r} holds a key that "
                        f"tenant {keys[key].name!r} already uses"
                    )
                keys[key] = tenant
        return cls(keys)

    def tenant_for(self, authorization: str | None) -> Tenant:
        """The tenant a request belongs to; :class:`AuthError` (401) when there is none."""
        if self.open:
            return OPEN_TENANT
        if not authorization:
            raise AuthError(
                401,
                "missing gateway key: send it as 'Authorization: Bearer KEY'",
                "missing_api_key",
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(401, "the Authorization header must be 'Bearer KEY'", "invalid_api_key")
        given = token.strip().encode()
        found: Tenant | None = None
        # Compare against every key, so the time taken does not tell which one was close.
        for key, tenant in self._keys:
            if hmac.compare_digest(key, given):
                found = tenant
        if found is None:
            raise AuthError(401, "unknown gateway key", "invalid_api_key")
        return found

    @staticmethod
    def check_model(tenant: Tenant, model: str) -> None:
        """:class:`AuthError` (403) when ``tenant`` may not use ``model``."""
        if not tenant.may_use(model):
            allowed = ", ".join(sorted(tenant.models))
            raise AuthError(
                403,
                f"tenant {tenant.name!r} may not use model {model!r} (allowed: {allowed})",
                "model_not_allowed",
            )


def gateway_key(headers: Mapping[str, str], path: str) -> str | None:
    """What a request says its gateway key is: its ``Authorization``, or, on Anthropic's
    paths (``/v1/messages``...), its ``x-api-key`` as a bearer key: where the Anthropic SDK
    puts it. (``x-api-key`` is the gateway's own header: it never goes upstream as it came.)"""
    authorization = headers.get("authorization")
    if authorization is None and path.startswith("/v1/messages"):
        key = headers.get("x-api-key")
        if key:
            return f"Bearer {key}"
    return authorization
