"""The gateway's HTTP face: an OpenAI-compatible Starlette app.

Routes: ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/responses`` and
``/v1/messages`` (streaming or not), the few JSON calls passed through whole
(gateway/passthrough.py: embeddings, moderations, token counts), ``GET /v1/models``,
``GET /healthz``, ``GET /metrics``, and the glass probe (``GET /steadystream/glass.js``,
``POST /steadystream/glass``: gateway/glass.py). Clients change only their base URL;
browsers on other origins are let in as ``cors`` says (gateway/cors.py). Anything else gets
a JSON error (404, 405), as the SDKs expect. With tenants configured, ``/metrics`` and
``/healthz`` need a gateway key too unless ``server.metrics_auth`` is off: they name tenants,
models and upstreams.

Every generation request is checked in this order, each failure an error in the shape its
API's SDK reads (Anthropic's on ``/v1/messages``, OpenAI's elsewhere: requests.error_shape):
gateway key (401), body size (413), body and fields (400 naming the field), model allowed
for the tenant (403), model served by an upstream (404), pacer header (400). Then it is
handed to :class:`~steadystream.gateway.relay.StreamRelay` or
:class:`~steadystream.gateway.whole.WholeRelay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from steadystream._clock import Clock, MonotonicClock
from steadystream._exceptions import ConfigError, SpecError
from steadystream.gateway.auth import Authenticator, Tenant, gateway_key
from steadystream.gateway.config import CorsConfig, GatewayConfig, ServerConfig
from steadystream.gateway.cors import CorsLayer
from steadystream.gateway.endpoints import (
    guarded,
    health_endpoint,
    http_error,
    metrics_endpoint,
    models_endpoint,
)
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.glass import gateway_glass_routes, glass_cors, glass_tokens
from steadystream.gateway.model_labels import ModelLabels
from steadystream.gateway.passthrough import PASSTHROUGH_ROUTES, Passthrough
from steadystream.gateway.recording import StreamRecord, TimelineRecorder, TimelineSink
from steadystream.gateway.relay import StreamRelay
from steadystream.gateway.requests import (
    ApiError,
    ProxyRequest,
    error_shape,
    model_not_served,
    parse_request,
    read_request_body,
    request_id_of,
)
from steadystream.gateway.requests import (
    Route as RouteName,
)
from steadystream.gateway.resume import open_hub
from steadystream.gateway.resume.hub import REFUSED, StreamHub, idempotency_key
from steadystream.gateway.resume.routes import join, resume_routes
from steadystream.gateway.resume.store import Claim
from steadystream.gateway.state import GatewayState
from steadystream.gateway.telemetry import GatewayTelemetry, telemetry_settings
from steadystream.gateway.translation import able_upstreams
from steadystream.gateway.upstream_metrics import scraping_upstreams
from steadystream.gateway.upstreams import ANTHROPIC_HEADERS, UpstreamPool, open_session
from steadystream.gateway.whole import WholeRelay
from steadystream.protocol.apis import API_PATHS
from steadystream.shaping import Pacer, parse_spec
from steadystream.shaping.base import check_watermarks

__all__ = ["PACER_HEADER", "check_startable", "create_app"]

PACER_HEADER = "X-Steadystream-Pacer"
IDEMPOTENCY_KEY = "Idempotency-Key"
_MAX_KEY = 255
# At shutdown, how long the streams the server cancelled get to end in-band (relay.py): the
# write of their last event is bounded at 1 s.
_REQUESTS_END_S = 2.0


def check_startable(config: GatewayConfig, env: Mapping[str, str] | None = None) -> Starlette:
    """The app for ``config``, or the :class:`ConfigError` the gateway would stop at when it
    starts with it: what :func:`create_app` refuses (a key's variable not set, a pacer that
    cannot run), and a recording directory it cannot write to (found otherwise only as it
    starts serving)."""
    app = create_app(config, env=env)
    rec = config.recording
    if rec.enabled:
        directory = Path(rec.directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as exc:
            raise ConfigError(
                f"recording.directory: cannot write recordings to {directory}: "
                f"{exc.strerror or exc}"
            ) from exc
    return app


def create_app(
    config: GatewayConfig,
    *,
    clock: Clock | None = None,
    registry: CollectorRegistry | None = None,
    session: aiohttp.ClientSession | None = None,
    recorder: TimelineSink | None = None,
    env: Mapping[str, str] | None = None,
    glass_secret: bytes | None = None,
    telemetry: GatewayTelemetry | None = None,
) -> Starlette:
    """The gateway as an ASGI app.

    ``session`` (the upstream transport), ``registry`` (metrics), ``recorder`` and ``clock``
    are passed in for tests; by default the app opens its own aiohttp session at startup,
    a fresh registry, the configured recording, and the monotonic clock. Keys are read from
    ``env`` (default ``os.environ``); a missing one is a :class:`ConfigError` right here.
    ``glass_secret``: the glass token secret the workers' parent made for all its workers
    (``glass.secret_env`` wins over it; neither: a new one, gateway/glass.py).
    ``telemetry`` (tests): OpenTelemetry export to use; by default the app opens its own at
    startup when ``otel`` or the ``OTEL_*`` environment turns it on.
    """
    env = os.environ if env is None else env
    _check_pacers(config)
    otel_settings = telemetry_settings(config, env) if telemetry is None else None
    clock = clock if clock is not None else MonotonicClock()
    state = GatewayState(
        config=config,
        auth=Authenticator.from_config(config, env),
        pool=UpstreamPool(config, session, env),
        clock=clock,
        metrics=GatewayMetrics(registry if registry is not None else CollectorRegistry()),
        recorder=recorder,
        glass_tokens=glass_tokens(config, env, clock, glass_secret),
        telemetry=telemetry,
    )
    state.resume = open_hub(config.resume, clock, state.metrics, state.log)
    state.model_labels = ModelLabels(
        [*state.pool.models(), *(m for t in config.tenants for m in t.models)],
        config.limits.max_model_labels,
        redact=state.pool.hide_keys,  # (a key sent as the model never becomes a label)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own_session = state.pool.session is None
        if own_session:
            state.pool.session = open_session(config)
        own_recorder = state.recorder is None and config.recording.enabled
        if own_recorder:
            rec = config.recording
            state.recorder = TimelineRecorder(
                rec.directory,
                keep_text=rec.keep_text,
                rotate_streams=rec.rotate_streams,
                keep_files=rec.keep_files,
            )
        if otel_settings is not None:  # each worker its own exporter, opened where it serves
            from steadystream.otel import open_exporter

            state.telemetry = GatewayTelemetry(open_exporter(otel_settings), config)
        try:
            async with scraping_upstreams(config):
                yield
        finally:
            if state.requests:
                # Streams the server cancelled as it shut down end in-band (relay.py,
                # _at_shutdown): their last events and records go out before what they
                # write to closes, and before a worker's process ends.
                await asyncio.wait(set(state.requests), timeout=_REQUESTS_END_S)
            try:
                if own_session and state.pool.session is not None:
                    await state.pool.session.close()
                    state.pool.session = None
                if own_recorder and state.recorder is not None:
                    state.recorder.close()
                    state.recorder = None
                if state.resume is not None:
                    await state.resume.close()
            finally:
                # Telemetry last: streams that end as the rest closes still go out. Bounded
                # (OtelSettings.shutdown_timeout_ms) whatever the collector does.
                if otel_settings is not None and state.telemetry is not None:
                    await asyncio.to_thread(state.telemetry.shutdown)
                    state.telemetry = None

    generation = {
        "/v1/chat/completions": _Generation(state, "chat"),
        "/v1/completions": _Generation(state, "completions"),
        "/v1/responses": _Generation(state, "responses"),
        "/v1/messages": _Generation(state, "messages"),
    }
    routes = [
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in generation.items()),
        *(
            Route(path, Passthrough(state, path, label), methods=["POST"])
            for path, label in PASSTHROUGH_ROUTES.items()
        ),
        Route("/v1/models", models_endpoint(state), methods=["GET"]),
        Route("/healthz", guarded(state, health_endpoint(state)), methods=["GET"]),
        Route("/metrics", guarded(state, metrics_endpoint(state)), methods=["GET"]),
        *gateway_glass_routes(state),
        *(resume_routes(state, state.resume) if state.resume is not None else ()),
    ]
    app = _GatewayApp(
        generation,
        glass_cors(config),
        config.server,
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
    )
    # A path with a slash added or missing is another path: a 404 in JSON like every unknown
    # one, not Starlette's 307 to a URL built from the client's Host header.
    app.router.redirect_slashes = False
    app.state.gateway = state
    return app


class _GatewayApp(Starlette):
    """Starlette, with the two generation routes called directly.

    Every event of a stream is one ASGI send; Starlette's middleware wraps each send in two
    more coroutines. The generation endpoints answer every error themselves (and uvicorn
    turns anything unexpected into a 500), so they skip the stack; the rest goes through it.
    """

    def __init__(
        self,
        generation: Mapping[str, ASGIApp],
        cors: CorsConfig,
        server: ServerConfig,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._generation = generation
        # Host and browsers' origins are checked before anything else (gateway/cors.py).
        self._entry = CorsLayer(self._dispatch, cors, server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._entry(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self._generation.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _check_pacers(config: GatewayConfig) -> None:
    """Configured pacers must work with the backpressure watermarks (a deadlock otherwise)."""
    limits = config.limits
    specs = [("pacing.default", config.pacing.default)]
    specs += [(f"pacing.routes.{r}", s) for r, s in config.pacing.routes.items()]
    specs += [(f"tenants.{i}.pacer", t.pacer) for i, t in enumerate(config.tenants)]
    for key, spec in specs:
        if spec is None:
            continue
        try:
            check_watermarks(
                parse_spec(spec), limits.pacer_high_watermark, limits.pacer_low_watermark
            )
        except SpecError as exc:
            raise ConfigError(f"key {key!r}: {exc}") from exc


class _Generation:
    """``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/responses`` or
    ``/v1/messages``, as an ASGI endpoint."""

    def __init__(self, state: GatewayState, route: RouteName) -> None:
        self.state = state
        self.route: RouteName = route
        self.shape = error_shape(API_PATHS[route])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        received = state.clock.now_ns()
        request = Request(scope, receive)
        request_id = request_id_of(request, state.pool.redact)
        headers = {"x-request-id": request_id}
        tenant_name = "unknown"
        try:
            tenant = state.auth.tenant_for(gateway_key(request.headers, request.url.path))
            tenant_name = tenant.name
            raw = await read_request_body(request, state.config)
            proxy = parse_request(raw, self.route)
            state.auth.check_model(tenant, proxy.model)
            candidates = able_upstreams(proxy, state.pool.candidates(proxy.model))
            if not candidates:
                raise model_not_served(proxy.model, state.pool.models())
            pacer = self._pacer(request, tenant, proxy)
        except ClientDisconnect:
            # The client left before its body was in: nobody to answer, nothing to trace.
            state.metrics.errors.labels(self.route, tenant_name, "client_disconnected").inc()
            state.log.debug("request %s: the client left mid-body", request_id)
            return
        except ApiError as exc:
            state.metrics.errors.labels(self.route, tenant_name, exc.code or "bad_request").inc()
            await exc.response(headers, self.shape)(scope, receive, send)
            return
        record = StreamRecord(
            request_id,
            received,
            {
                # (a client's key pasted as the model goes in no record, span or log line)
                # (escaped where written: a record's JSON, a label on /metrics, a span)
                "model": state.pool.redact(proxy.model, lines=True),
                "route": self.route,
                "tenant": tenant.name,
                "upstream": candidates[0].name,
            },
        )
        record.meta["pacer"] = None if pacer is None else repr(pacer)
        forward = {name for upstream in candidates for name in upstream.forward_headers}
        forward.update(ANTHROPIC_HEADERS)  # (sent on to Messages upstreams only)
        # (a header sent several times goes on as one, its values joined as HTTP allows)
        client_headers = {n: ", ".join(v) for n in forward if (v := request.headers.getlist(n))}
        if state.telemetry is not None:
            record.trace = state.telemetry.begin(request.headers, proxy.stream)
            client_headers.update(record.trace.context.headers())
        if proxy.stream:
            hub = state.resume
            live = None
            if hub is not None:
                stream_id = hub.new_id()
                keys = request.headers.getlist(IDEMPOTENCY_KEY)
                if keys:
                    held = await self._claim(hub, tenant_name, keys, raw, stream_id)
                    if isinstance(held, ApiError):
                        state.metrics.errors.labels(
                            self.route, tenant_name, held.code or "bad_request"
                        ).inc()
                        await held.response(headers, self.shape)(scope, receive, send)
                        return
                    if held is not None:  # the request again: join its stream
                        await join(state, hub, held, request, scope, receive, send)
                        return
                live = hub.open(self.route, tenant_name, state.pool.byte_scrubber(), stream_id)
            relay = StreamRelay(
                state,
                proxy,
                record,
                candidates,
                pacer=pacer,
                client_headers=client_headers,
                live=live,
            )
            await relay(scope, receive, send)
        else:
            whole = WholeRelay(state, proxy, record, candidates, client_headers=client_headers)
            await whole(scope, receive, send)

    async def _claim(
        self, hub: StreamHub, tenant: str, keys: list[str], body: bytes, stream_id: str
    ) -> str | ApiError | None:
        """Bind ``Idempotency-Key`` (``keys``: as often as it was sent) to the new stream:
        None, or the stream the key already names (the request again), or the error of a
        key that cannot be used."""
        if len(set(keys)) > 1:  # (either guess could start a second generation)
            return ApiError(
                400,
                f"{IDEMPOTENCY_KEY}: sent {len(keys)} times with different values; send one",
                param=IDEMPOTENCY_KEY,
            )
        key = keys[0]
        if not key or len(key) > _MAX_KEY or not key.isprintable():
            return ApiError(
                400,
                f"{IDEMPOTENCY_KEY}: a key is 1 to {_MAX_KEY} printable characters",
                param=IDEMPOTENCY_KEY,
            )
        digest = hashlib.sha256(body).hexdigest()[:32]
        name = idempotency_key(tenant, API_PATHS[self.route], key)
        claim = Claim(stream_id, digest)
        held = await hub.claim(name, claim)
        if held is None:
            return None
        info = await hub.info(held.stream_id)
        if info is not None and info.ended == REFUSED:
            # The first was refused (it got the error): this one is tried anew, and the key
            # names it now, so that a repeat of this one joins it.
            refused = held
            held = await hub.claim(name, claim, replacing=refused)
            if held is None:
                return None
            info = await hub.info(held.stream_id)
            if info is not None and info.ended == REFUSED:
                return None  # (refused too, meanwhile: tried anew, once more)
        if held.body != digest:
            return ApiError(
                409,
                f"{IDEMPOTENCY_KEY}: the key was used with another request body",
                param=IDEMPOTENCY_KEY,
                code="idempotency_key_reused",
            )
        return held.stream_id

    def _pacer(self, request: Request, tenant: Tenant, proxy: ProxyRequest) -> Pacer | None:
        """The request's pacer: its header, else its tenant's, its route's, the default."""
        pacing = self.state.config.pacing
        route = self.route
        if route == "chat" or route == "completions":
            spec = pacing.routes.get(route, pacing.default)
        else:
            spec = pacing.default
        if tenant.pacer is not None:
            spec = tenant.pacer
        header = request.headers.get(PACER_HEADER)
        from_header = header is not None and pacing.allow_header
        if from_header:
            spec = header
        # (Typed events are relayed as they come: a pacer re-sends text in chat's shape.)
        if spec is None or not proxy.stream or proxy.choices != 1 or proxy.typed:
            return None
        limits = self.state.config.limits
        try:
            pacer = parse_spec(spec)
            check_watermarks(pacer, limits.pacer_high_watermark, limits.pacer_low_watermark)
            if from_header:
                _check_header_pacer(pacer)
        except SpecError as exc:
            raise ApiError(400, f"{PACER_HEADER}: {exc}", param=PACER_HEADER) from exc
        return None if pacer.name == "passthrough" else pacer


HEADER_PACER_MOST_NS = 1_000_000_000
"""The longest a pacer chosen by a request's header may space or hold each token (``tail``,
once per stream and never slower than that spacing, is free): a client may not hold its
stream, and the upstream's connection, open for hours with ``leaky:interval=100000s``. The
configuration's own pacers are the operator's."""


def _check_header_pacer(pacer: Pacer) -> None:
    for param in pacer.params:
        if param.kind != "duration" or param.name == "tail":
            continue
        if getattr(pacer, param.attr) > HEADER_PACER_MOST_NS:
            raise SpecError(
                f"{pacer.name}: {param.name} may be at most 1s in a request's header"
                " (the gateway's configuration may set more)"
            )
