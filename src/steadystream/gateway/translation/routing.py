"""Which API each upstream is called in for a request, and which upstreams can take it.

An upstream with no ``dialects`` speaks whatever the client used (passthrough). One that
lists its dialects is called in the client's when it lists it; else a Responses or Messages
request is translated into chat for it when it lists chat; else it cannot take the request.
"""

from __future__ import annotations

from collections.abc import Sequence

from steadystream._api_errors import ApiError
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.requests import ProxyRequest
from steadystream.gateway.translation.bodies import chat_request
from steadystream.protocol.apis import Api

__all__ = ["TRANSLATED", "able_upstreams", "upstream_api"]

TRANSLATED: tuple[Api, ...] = ("responses", "messages")
"""The client APIs the gateway translates into chat for an upstream that speaks only chat."""


def upstream_api(upstream: UpstreamConfig, route: Api) -> Api | None:
    """The API ``upstream`` is called in for a client of ``route``: the same when it speaks
    it, chat when it is translated, None when it can take no such request."""
    dialects = upstream.dialects
    if dialects is None or route in dialects:
        return route
    if route in TRANSLATED and "chat" in dialects:
        return "chat"
    return None


def able_upstreams(
    request: ProxyRequest, candidates: Sequence[UpstreamConfig]
) -> list[UpstreamConfig]:
    """Those of ``candidates`` (the upstreams serving the model, in order) that can take
    ``request``: in its own API, or translated into chat when its body can be.

    An :class:`ApiError` when there were candidates but none can: a 400 naming the field
    chat cannot carry when only translating upstreams were left, else a 404 naming the
    ``dialects`` key. No candidates at all is the caller's 404 (the model is not served).
    """
    route = request.route
    able: list[UpstreamConfig] = []
    refusal: ApiError | None = None
    translatable: bool | None = None  # (found out once, when an upstream needs it)
    for upstream in candidates:
        api = upstream_api(upstream, route)
        if api is None:
            continue
        if api != route:
            if translatable is None:
                try:
                    chat_request(route, request.body, stream=request.stream)
                    translatable = True
                except ApiError as exc:
                    refusal, translatable = exc, False
            if not translatable:
                continue
        able.append(upstream)
    if able or not candidates:
        return able
    if refusal is not None:
        raise refusal
    names = ", ".join(upstream.name for upstream in candidates)
    speaking = f"neither {route} nor chat" if route in TRANSLATED else f"no {route}"
    raise ApiError(
        404,
        f"model: {request.model!r} is served only by upstreams that speak {speaking}"
        f" ({names}; see upstreams[].dialects)",
        param="model",
        code="model_not_found",
    )
