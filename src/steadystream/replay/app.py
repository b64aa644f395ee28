"""The replay's HTTP face: a Starlette app that plays recorded streams in the lab's APIs.

Routes: one ``POST`` per API the lab speaks (:mod:`~steadystream.lab.apis`:
``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses`` and ``/v1/messages``,
streaming or not, any model name; each written through its API's wire, refused in its
API's error shape), ``GET /v1/models``, ``GET /replay/streams`` (the recorded ids),
``GET /replay/requests`` and ``GET /replay/requests/{id}`` (what each request was played
and what was injected: the lab's ground-truth shape, plus ``source_stream`` and
``injected``), ``GET /healthz``, and the glass probe (``/steadystream/glass.js``, and
``/steadystream/glass``, whose reports are kept in memory for the glass harness), and
``GET /metrics``: ``lab:injected_faults_total``, the pauses injected so far (counted as each
is played), which ``bench --engine-metrics auto`` scrapes and attribution reads.

Which recording a request gets: the one named by its ``X-Replay-Stream`` header, else the
next in turn. The replay serves pages on other origins (it holds no secret and is meant for
loopback): every origin may call it, with any header.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from steadystream._api_errors import (
    ApiError,
    error_response,
    is_client_id,
    json_response,
    read_body,
)
from steadystream._clock import Clock, MonotonicClock
from steadystream._exceptions import InputError
from steadystream.attribution.engine import INJECTED_FAULTS
from steadystream.glass.intake import GlassLimits
from steadystream.glass.routes import glass_routes
from steadystream.lab.api import LabBody, parse_body
from steadystream.lab.apis import APIS, LabApi, WireContext
from steadystream.lab.truth import RequestTruth, TruthStore
from steadystream.replay.inject import MAX_INJECTIONS, Injection, inject
from steadystream.replay.response import ReplayResponse
from steadystream.replay.source import RecordedStreams, plan_of
from steadystream.timeline import Timeline

__all__ = ["STREAM_HEADER", "ReplayState", "create_app"]

STREAM_HEADER = "X-Replay-Stream"
_Endpoint = Callable[[Request], Awaitable[Response]]
_MAX_BODY = 1_048_576
_KEEP_TRUTHS = 10_000
_KEEP_GLASS = 20_000
# A post may carry 2 x 20,000 events (about 1 MB kept): the reports are bounded by their
# events too, or 20,000 posts of a hostile page would hold gigabytes.
_KEEP_GLASS_EVENTS = 4_000_000
_DEFAULT_STALL_LIMIT_NS = 300_000_000_000


@dataclass(eq=False)
class ReplayState:
    """What the routes share."""

    streams: RecordedStreams
    injections: tuple[Injection, ...]
    seed: int
    clock: Clock
    stall_limit_ns: int
    on_done: Callable[[RequestTruth], None] | None = None  # each played request, when done
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    truths: TruthStore = field(default_factory=lambda: TruthStore(_KEEP_TRUTHS))
    sources: dict[str, tuple[str, list[dict[str, object]]]] = field(default_factory=dict)
    glass: deque[Timeline] = field(default_factory=deque)
    glass_events: int = 0
    ordinals: itertools.count[int] = field(default_factory=lambda: itertools.count(0))
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        # The pauses injected, counted as each is played (when the event it held is written):
        # in the lab's names, so that attribution reads them from scraped engine metrics.
        self.injected = Counter(
            INJECTED_FAULTS.removesuffix("_total"),
            "Injected pauses played (the event each held back was written).",
            registry=self.registry,
        )

    def next_stream(self, ordinal: int) -> Timeline:
        return self.streams.streams[ordinal % len(self.streams)]

    def keep_glass(self, timelines: Sequence[Timeline]) -> None:
        """Keep a page's report; the oldest go past ``_KEEP_GLASS`` or ``_KEEP_GLASS_EVENTS``."""
        glass = self.glass
        for timeline in timelines:
            glass.append(timeline)
            self.glass_events += len(timeline)
        while len(glass) > _KEEP_GLASS or (self.glass_events > _KEEP_GLASS_EVENTS and glass):
            self.glass_events -= len(glass.popleft())


def create_app(
    timelines: Sequence[Timeline],
    *,
    injections: Sequence[Injection] = (),
    seed: int = 0,
    where: str | None = None,
    only: Sequence[str] = (),
    clock: Clock | None = None,
    stall_limit_ns: int = _DEFAULT_STALL_LIMIT_NS,
    on_done: Callable[[RequestTruth], None] | None = None,
) -> Starlette:
    """The replay as an ASGI app; an :class:`InputError` when the run has nothing to play.
    ``on_done`` gets each request's ground truth once it is played (``replay --record``)."""
    if len(injections) > MAX_INJECTIONS:
        raise InputError(f"inject: {len(injections):,} injections; at most {MAX_INJECTIONS:,}")
    if seed < 0:  # numpy seeds each request's draws with (seed, ordinal): 0 or more
        raise InputError(f"seed: {seed} is negative (0 or more)")
    state = ReplayState(
        streams=RecordedStreams.choose(timelines, where, only),
        injections=tuple(injections),
        seed=seed,
        clock=clock if clock is not None else MonotonicClock(),
        stall_limit_ns=stall_limit_ns,
        on_done=on_done,
    )
    routes = [
        *(Route(api.path, _generation(state, api), methods=["POST"]) for api in APIS),
        Route("/v1/models", _models, methods=["GET"]),
        Route("/replay/streams", _stream_ids(state), methods=["GET"]),
        Route("/replay/requests", _request_ids(state), methods=["GET"]),
        Route("/replay/requests/{request_id:path}", _truth(state), methods=["GET"]),
        Route("/healthz", _health, methods=["GET"]),
        Route("/metrics", _metrics(state), methods=["GET"]),
        *glass_routes(state.keep_glass, GlassLimits()),
    ]
    cors = Middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_methods=["GET", "POST"],
        allow_headers=["*"],
        expose_headers=["x-request-id"],
        max_age=600,
    )
    app = Starlette(routes=routes, middleware=[cors])
    app.state.replay = state
    return app


def _metrics(state: ReplayState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        return Response(generate_latest(state.registry), media_type=CONTENT_TYPE_LATEST)

    return endpoint


async def _health(request: Request) -> Response:
    return json_response({"status": "ok"})


async def _models(request: Request) -> Response:
    data = [
        {
            "id": "replay",
            "object": "model",
            "created": int(time.time()),
            "owned_by": "steadystream-replay",
        }
    ]
    return json_response({"object": "list", "data": data})


def _generation(state: ReplayState, api: LabApi[Any]) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        arrival = state.clock.now_ns()
        request_id = _request_id(state, request.headers.get("x-request-id"))
        headers = {"x-request-id": request_id}
        try:
            body: LabBody = parse_body(await read_body(request, _MAX_BODY), api.body)
            chosen = request.headers.get(STREAM_HEADER)
            recorded: Timeline | None = None
            if chosen is not None:
                recorded = state.streams.by_id(chosen)
                if recorded is None:
                    raise ApiError(
                        404,
                        f"no recorded stream {chosen!r} (GET /replay/streams lists them)",
                        param=STREAM_HEADER,
                    )
        except ApiError as exc:
            return api.refuse(exc, headers)
        except ClientDisconnect:  # left before its body was in: nobody to answer
            return Response(status_code=400, headers=headers)
        ordinal = next(state.ordinals)
        if recorded is None:
            recorded = state.next_stream(ordinal)
        # One generator per request, from (seed, ordinal): the same order, the same draws.
        rng = np.random.default_rng((state.seed, ordinal))
        plan = inject(plan_of(recorded, rng), state.injections, rng)
        truth = RequestTruth(
            request_id=request_id,
            model=body.model,
            endpoint=api.name,
            stream=body.stream,
            ordinal=ordinal,
            arrival_ns=arrival,
            prompt_tokens=body.prompt_tokens(0),
            target_tokens=plan.total_tokens,
            fault=",".join(i.spec for i in state.injections),
        )
        state.truths.add(truth)
        state.sources[request_id] = (recorded.stream_id, plan.applied)
        while len(state.sources) > _KEEP_TRUTHS:
            del state.sources[next(iter(state.sources))]
        wire = api.wire(body, WireContext(request_id, int(time.time()), truth.prompt_tokens))
        return ReplayResponse(
            plan,
            truth,
            wire,
            state.clock,
            stream=body.stream,
            stall_limit_ns=state.stall_limit_ns,
            refuse=api.refuse,
            on_done=state.on_done,
            on_injected=state.injected.inc,
        )

    return endpoint


def _request_id(state: ReplayState, given: str | None) -> str:
    if not given or not is_client_id(given):
        while (candidate := f"replay-{next(state.ids):06d}") in state.truths:
            pass
        return candidate
    if given not in state.truths:
        return given
    for n in itertools.count(2):
        if (candidate := f"{given}.{n}") not in state.truths:
            return candidate
    raise AssertionError("unreachable")


def _stream_ids(state: ReplayState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        ids = [t.stream_id for t in state.streams.streams]
        return json_response({"where": state.streams.where.value, "stream_ids": ids})

    return endpoint


def _request_ids(state: ReplayState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        return json_response({"request_ids": state.truths.ids()})

    return endpoint


def _truth(state: ReplayState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        request_id = request.path_params["request_id"]
        truth = state.truths.get(request_id)
        if truth is None:
            return error_response(
                404, f"no ground truth for request {request_id!r}", param="request_id"
            )
        source, applied = state.sources.get(request_id, ("", []))
        return json_response({**truth.to_json(), "source_stream": source, "injected": applied})

    return endpoint
