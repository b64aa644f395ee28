"""The lab's HTTP face: a Starlette app around one :class:`LabEngine`.

Routes: one ``POST`` per API it speaks (:mod:`~steadystream.lab.apis`:
``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, ``/v1/messages``),
``GET /v1/models``, ``GET /metrics``, ``GET /lab/requests`` (recent ids),
``GET /lab/requests/{id}`` (ground truth), ``GET /healthz``. The engine starts and stops
with the app's lifespan.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from steadystream._api_errors import is_client_id, json_response
from steadystream._clock import Clock
from steadystream._exceptions import SpecError
from steadystream.lab.api import ApiError, LabBody, error_response, parse_body
from steadystream.lab.apis import APIS, LabApi, WireContext
from steadystream.lab.engine import LabEngine
from steadystream.lab.faults import FAULT_HEADER, parse_fault_header
from steadystream.lab.metrics import CONTENT_TYPE, LabMetrics
from steadystream.lab.responses import ConnectionResetter, LabResponse
from steadystream.lab.scenario import Scenario
from steadystream.lab.scenario_file import load_scenario
from steadystream.lab.sequence import LabRequest
from steadystream.lab.truth import RequestTruth

__all__ = ["LabState", "create_app"]

_Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(eq=False)
class LabState:
    """What the routes share: the engine, its metrics, and the server's connection resetter."""

    engine: LabEngine
    metrics: LabMetrics
    resetter: ConnectionResetter | None = None
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


def create_app(
    scenario: Scenario | str = "steady",
    *,
    seed: int = 0,
    clock: Clock | None = None,
    registry: CollectorRegistry | None = None,
    on_done: Callable[[RequestTruth], None] | None = None,
) -> Starlette:
    """The lab as an ASGI app. ``on_done`` is called with each request's finished truth."""
    if isinstance(scenario, str):
        scenario = load_scenario(scenario)
    metrics = LabMetrics(
        registry if registry is not None else CollectorRegistry(),
        model_name=scenario.server.models[0],
    )
    engine = LabEngine(scenario, seed=seed, clock=clock, metrics=metrics, on_done=on_done)
    state = LabState(engine, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    routes = [
        *(Route(api.path, _generation(state, api), methods=["POST"]) for api in APIS),
        Route("/v1/models", _models(state), methods=["GET"]),
        Route("/metrics", _metrics(state), methods=["GET"]),
        Route("/lab/requests", _request_ids(state), methods=["GET"]),
        Route("/lab/requests/{request_id:path}", _truth(state), methods=["GET"]),
        Route("/healthz", _health, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.lab = state
    return app


async def _health(request: Request) -> Response:
    return json_response({"status": "ok"})


def _generation(state: LabState, api: LabApi[Any]) -> _Endpoint:
    engine = state.engine
    scenario = engine.scenario

    async def endpoint(request: Request) -> Response:
        request_id = _request_id(state, request.headers.get("x-request-id"))
        headers = {"x-request-id": request_id}
        try:
            raw = await _read_body(request, scenario.server.max_body_bytes)
            body: LabBody = parse_body(raw, api.body)
            if body.model not in scenario.server.models:
                raise ApiError(
                    404,
                    f"The model `{body.model}` does not exist "
                    f"(served: {', '.join(scenario.server.models)}).",
                    param="model",
                    code="model_not_found",
                )
            faults = None
            if (fault_header := request.headers.get(FAULT_HEADER)) is not None:
                try:
                    faults = parse_fault_header(fault_header)
                except SpecError as exc:
                    raise ApiError(400, str(exc), param=FAULT_HEADER) from exc
            prompt_tokens = body.prompt_tokens(scenario.output.prompt_overhead_tokens)
            if prompt_tokens >= engine.capacity_tokens:
                raise ApiError(
                    400,
                    f"the prompt has about {prompt_tokens} tokens; the lab's KV cache holds "
                    f"{engine.capacity_tokens}",
                    param=api.prompt_field,
                )
            if not engine.running:
                raise ApiError(503, "the lab is not running", type="server_error")
        except ApiError as exc:
            return api.refuse(exc, headers)
        handle = engine.submit(
            LabRequest(
                request_id=request_id,
                model=body.model,
                prompt_tokens=prompt_tokens,
                max_tokens=body.token_limit,
                ignore_eos=body.ignore_eos,
                faults=faults,
                endpoint=api.name,
                stream=body.stream,
            )
        )
        wire = api.wire(body, WireContext(request_id, int(time.time()), prompt_tokens))
        credential_name, credential = _credential(request, api.credential_headers)
        return LabResponse(
            handle,
            wire,
            stream=body.stream,
            request_id=request_id,
            metrics=state.metrics,
            resetter=state.resetter,
            authorization=credential,
            credential_name=credential_name,
        )

    return endpoint


def _credential(request: Request, names: tuple[str, ...]) -> tuple[str, str | None]:
    """The first of ``names`` the request has (for the echo-auth fault), and its value."""
    for name in names:
        if (value := request.headers.get(name)) is not None:
            return name, value
    return names[0], None


def _request_id(state: LabState, given: str | None) -> str:
    """The client's id when it may be used as given (:func:`is_client_id`: it becomes a key,
    a header, a URL path and part of JSON ids), numbered if repeated; else a new one."""
    truths = state.engine.truths
    if not given or not is_client_id(given):
        while (candidate := f"lab-{next(state.ids):06d}") in truths:
            pass
        return candidate
    if given not in truths:
        return given
    # A retried id keeps its earlier record: number the repeats.
    for n in itertools.count(2):
        if (candidate := f"{given}.{n}") not in truths:
            return candidate
    raise AssertionError("unreachable")


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the body is larger than {limit} bytes", code="request_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the body is larger than {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _models(state: LabState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "steadystream-lab"}
            for name in state.engine.scenario.server.models
        ]
        return json_response({"object": "list", "data": data})

    return endpoint


def _metrics(state: LabState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        engine = state.engine
        state.metrics.observe_step(engine.num_running, engine.num_waiting, engine.kv_usage, 0)
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)

    return endpoint


def _request_ids(state: LabState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        return json_response({"request_ids": state.engine.truths.ids()})

    return endpoint


def _truth(state: LabState) -> _Endpoint:
    async def endpoint(request: Request) -> Response:
        request_id = request.path_params["request_id"]
        truth = state.engine.truth(request_id)
        if truth is None:
            return error_response(
                404, f"no ground truth for request {request_id!r}", param="request_id"
            )
        return json_response(truth.to_json())

    return endpoint
