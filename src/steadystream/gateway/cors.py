"""Browsers on other origins: CORS as configured (``cors`` section), and nothing else.

With ``cors.allow_origins`` empty (the default) the gateway sends no CORS header, so a page
on another origin cannot read any answer, and its preflight gets 405. With origins allowed,
Starlette's ``CORSMiddleware`` answers preflights and adds the headers that let ``fetch``
read a streamed answer as it arrives.

Either way, a request that carries an ``Origin`` that is neither allowed nor the gateway's
own is refused with 403 before anything is read or sent upstream (``refuse_other_origins``):
a browser lets any page send a "simple" POST (``text/plain``) without a preflight, and then
hides the answer from it, so without this check such a page could start generations that
cost upstream tokens and that nobody reads. Requests without ``Origin`` (SDKs, curl, servers)
are untouched, and cost one header scan.
"""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from steadystream._api_errors import error_response
from steadystream.gateway.config import CorsConfig

__all__ = ["CorsLayer"]

_ORIGIN = b"origin"
_HOST = b"host"
_MAX_SHOWN = 100


class CorsLayer:
    """An ASGI layer in front of the gateway's routes (see the module docstring)."""

    def __init__(self, app: ASGIApp, config: CorsConfig) -> None:
        self.app = app
        self.config = config
        self._any = "*" in config.allow_origins
        self._allowed = frozenset(config.allow_origins)
        self._cors: ASGIApp | None = None
        if config.allow_origins:
            self._cors = CORSMiddleware(
                app,
                allow_origins=list(config.allow_origins),
                allow_methods=list(config.allow_methods),
                allow_headers=list(config.allow_headers),
                allow_credentials=config.allow_credentials,
                expose_headers=list(config.expose_headers),
                max_age=config.max_age,
            )

    def allowed(self, origin: str) -> bool:
        return self._any or origin in self._allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = host = None
        for name, value in scope["headers"]:
            if name == _ORIGIN:
                origin = value.decode("latin-1")
            elif name == _HOST:
                host = value.decode("latin-1")
        if origin is None:
            await self.app(scope, receive, send)
            return
        if self.allowed(origin):
            await (self._cors or self.app)(scope, receive, send)
            return
        same = host is not None and origin.split("://", 1)[-1] == host
        if same or not self.config.refuse_other_origins:
            await self.app(scope, receive, send)
            return
        shown = origin[:_MAX_SHOWN]
        response = error_response(
            403,
            f"origin {shown!r} may not call this gateway (cors.allow_origins)",
            "Origin",
            "permission_error",
            "origin_not_allowed",
        )
        await response(scope, receive, send)
