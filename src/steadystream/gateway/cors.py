"""Browsers: Host names the gateway, CORS as configured (``cors`` section), and nothing else.

First Host: on a connection that came in on loopback, a Host that does not name the gateway
gets 421 (``host_not_allowed``) before anything else, which is what stops a page that
rebinds its own name to 127.0.0.1 (:mod:`steadystream.gateway.hosts`).

With ``cors.allow_origins`` empty (the default) the gateway sends no CORS header, so a page
on another origin cannot read any answer, and its preflight is refused. With origins allowed,
Starlette's ``CORSMiddleware`` answers preflights and adds the headers that let ``fetch``
read a streamed answer as it arrives.

Either way, a request that carries an ``Origin`` that is neither allowed nor the gateway's
own (scheme, host and port, as the gateway serves them) is refused with 403 before anything
is read or sent upstream (``refuse_other_origins``): a browser lets any page send a "simple"
POST (``text/plain``) without a preflight, and then hides the answer from it, so without
this check such a page could start generations that cost upstream tokens and that nobody
reads. A request with several ``Origin`` headers passes only if every one would. Requests
without ``Origin`` (SDKs, curl, servers) pass the Host check alone, and cost one header scan.

Starlette's ``TrustedHostMiddleware`` is not used for Host: it compares names without their
port (the port is what tells this gateway from another program on the same machine), does
not know the address a request came in on, and answers in plain text, not the OpenAI-style
JSON the SDKs read.
"""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from steadystream._api_errors import error_response
from steadystream.gateway.config import CorsConfig, ServerConfig
from steadystream.gateway.hosts import ServedHosts
from steadystream.gateway.requests import error_shape

__all__ = ["CorsLayer"]

_ORIGIN = b"origin"
_HOST = b"host"
_MAX_SHOWN = 100


class CorsLayer:
    """An ASGI layer in front of the gateway's routes (see the module docstring)."""

    def __init__(self, app: ASGIApp, config: CorsConfig, server: ServerConfig) -> None:
        self.app = app
        self.config = config
        self.hosts = ServedHosts(server.allowed_hosts, (server.host, server.port))
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
        origins: list[str] = []
        hosts: list[str] = []
        for name, value in scope["headers"]:
            if name == _ORIGIN:
                origins.append(value.decode("latin-1"))
            elif name == _HOST:
                hosts.append(value.decode("latin-1"))
        refused = self.hosts.refused(scope, hosts) if hosts else None
        if refused is not None:
            own = self.hosts.own_names(scope)
            response = error_response(
                421,
                f"host {refused[:_MAX_SHOWN]!r} is not a name of this gateway (it answers to"
                f" {own}, and to the names in server.allowed_hosts)",
                "Host",
                "invalid_request_error",
                "host_not_allowed",
                shape=error_shape(scope["path"]),
            )
            await response(scope, receive, send)
            return
        if not origins:
            await self.app(scope, receive, send)
            return
        if all(self.allowed(origin) for origin in origins):
            await (self._cors or self.app)(scope, receive, send)
            return
        other = next(
            (
                origin
                for origin in origins
                if not self.allowed(origin) and not self.hosts.is_own_origin(scope, hosts, origin)
            ),
            None,
        )
        if other is None or not self.config.refuse_other_origins:
            await self.app(scope, receive, send)
            return
        response = error_response(
            403,
            f"origin {other[:_MAX_SHOWN]!r} may not call this gateway (cors.allow_origins)",
            "Origin",
            "permission_error",
            "origin_not_allowed",
            shape=error_shape(scope["path"]),
        )
        await response(scope, receive, send)
