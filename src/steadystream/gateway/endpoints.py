"""The gateway's small endpoints: ``GET /v1/models``, ``/healthz``, ``/metrics``, and the
refusals Starlette makes itself (no such route, a wrong method) in the path's error shape.

``/healthz`` and ``/metrics`` sit behind a gateway key when tenants exist and
``server.metrics_auth`` is on (:func:`guarded`); ``/v1/models`` always asks for one, and lists
only what the tenant may use.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from steadystream._api_errors import ApiError, error_response
from steadystream._exceptions import UpstreamError
from steadystream.gateway.auth import gateway_key
from steadystream.gateway.export import CONTENT_TYPE
from steadystream.gateway.requests import error_shape
from steadystream.gateway.state import GatewayState

__all__ = [
    "Endpoint",
    "guarded",
    "health_endpoint",
    "http_error",
    "metrics_endpoint",
    "models_endpoint",
]

Endpoint = Callable[[Request], Awaitable[Response]]
_MODELS_TIMEOUT_S = 3.0  # an upstream that serves any model, asked what it has


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method), in the path's error shape."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    shape = error_shape(path)
    if exc.status_code == 404:
        message = f"no such route: {request.method} {path}"
        return error_response(404, message, None, "invalid_request_error", "not_found", shape=shape)
    message = f"{request.method} is not allowed on {path}"
    return error_response(
        exc.status_code, message, None, "invalid_request_error", "method_not_allowed",
        headers=dict(exc.headers or {}), shape=shape,
    )  # fmt: skip


def guarded(state: GatewayState, endpoint: Endpoint) -> Endpoint:
    """``endpoint`` behind a gateway key when tenants exist and ``server.metrics_auth`` is on."""
    if state.auth.open or not state.config.server.metrics_auth:
        return endpoint

    async def behind_key(request: Request) -> Response:
        try:
            state.auth.tenant_for(gateway_key(request.headers, request.url.path))
        except ApiError as exc:
            return exc.response()
        return await endpoint(request)

    return behind_key


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def models_endpoint(state: GatewayState) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        try:
            tenant = state.auth.tenant_for(gateway_key(request.headers, request.url.path))
        except ApiError as exc:
            return exc.response()
        names = dict.fromkeys(state.pool.models())
        for upstream in state.pool.upstreams:
            if upstream.models:
                continue
            # An upstream that serves any model: ask it what it has.
            try:
                listed = await state.pool.get_json(upstream, "/models", _MODELS_TIMEOUT_S)
            except UpstreamError as exc:
                state.log.info("models of upstream %s: %s", upstream.name, exc)
                continue
            data = listed.get("data") if isinstance(listed, dict) else None
            for item in data if isinstance(data, list) else ():  # (null, a number: nothing)
                if isinstance(item, dict) and isinstance(item.get("id"), str):
                    names.setdefault(state.pool.redact(item["id"]), None)  # text from outside
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "steadystream"}
            for name in names
            if tenant.may_use(name)
        ]
        return _json({"object": "list", "data": data})

    return endpoint


def health_endpoint(state: GatewayState) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        health: dict[str, object] = {
            "status": "ok",
            "upstreams": [u.name for u in state.pool.upstreams],
        }
        if state.resume is not None:
            health["resume"] = state.resume.health()
        return _json(health)

    return endpoint


def metrics_endpoint(state: GatewayState) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        return Response(await state.metrics.render(), media_type=CONTENT_TYPE)

    return endpoint
