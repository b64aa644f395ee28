"""The JSON calls the gateway passes through whole, so it can front a whole API.

A fixed list (:data:`PASSTHROUGH_ROUTES`): ``POST /v1/embeddings``, ``/v1/moderations``,
``/v1/messages/count_tokens`` (Anthropic) and ``/v1/responses/input_tokens`` (OpenAI). Each
is admitted as a generation request is (gateway key 401, body within
``limits.max_body_bytes`` 413 and ``server.body_timeout`` 408, a JSON object naming its
``model`` 400, the tenant's models 403, a model some upstream serves 404), then sent to the
first upstream serving the model, with that upstream's own key, its ``model_map`` name for
the model and the client headers it forwards (:class:`UpstreamPool`). A connection not made
or a status of ``failover.retry_statuses`` goes on to the next (as
:class:`~steadystream.gateway.whole.WholeRelay` does); the answer comes back with its status,
at most ``limits.max_response_bytes``, keys scrubbed, with ``X-Request-Id`` (a 1xx, or an
answer in a content coding, is no answer: :func:`~steadystream.gateway.whole.check_answer`).
The last refusal is passed on as a generation's is (gateway/refusal.py), in the path's error
shape.

None of it is a stream: nothing is recorded or paced, and it is counted in
``steadystream_passthrough_requests_total`` (route: the list's label), not in the stream
metrics. A client that leaves closes the upstream request.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from steadystream._exceptions import UpstreamError
from steadystream.gateway.auth import gateway_key
from steadystream.gateway.base import retryable
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.disconnect import run_until_disconnect
from steadystream.gateway.refusal import refusal_headers, upstream_refusal
from steadystream.gateway.requests import (
    ApiError,
    error_shape,
    model_not_served,
    parse_model_body,
    read_request_body,
    request_id_of,
)
from steadystream.gateway.state import GatewayState
from steadystream.gateway.upstreams import ANTHROPIC_HEADERS, media_type, read_whole
from steadystream.gateway.whole import check_answer

__all__ = ["PASSTHROUGH_ROUTES", "Passthrough"]

PASSTHROUGH_ROUTES: dict[str, str] = {
    "/v1/embeddings": "embeddings",
    "/v1/moderations": "moderations",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/responses/input_tokens": "input_tokens",
}
"""Each path passed through, and its ``route`` metric label (a fixed list: bounded)."""

_NO_UPSTREAM = "none"


class Passthrough:
    """One path of :data:`PASSTHROUGH_ROUTES`, as an ASGI endpoint."""

    def __init__(self, state: GatewayState, path: str, route: str) -> None:
        self.state = state
        self.path = path.removeprefix("/v1")  # under each upstream's base URL
        self.route = route
        self.shape = error_shape(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        request = Request(scope, receive)
        request_id = request_id_of(request, state.pool.redact)
        tenant, model = "unknown", ""
        try:
            found = state.auth.tenant_for(gateway_key(request.headers, request.url.path))
            tenant = found.name
            body, model = parse_model_body(await read_request_body(request, state.config))
            state.auth.check_model(found, model)
            candidates = state.pool.candidates(model)
            if not candidates:
                raise model_not_served(model, state.pool.models())
        except ClientDisconnect:
            state.metrics.errors.labels(self.route, tenant, "client_disconnected").inc()
            return
        except ApiError as exc:
            self._count(model, tenant, _NO_UPSTREAM, str(exc.status))
            state.metrics.errors.labels(self.route, tenant, exc.code or "bad_request").inc()
            await exc.response({"x-request-id": request_id}, self.shape)(scope, receive, send)
            return
        forward = {name for upstream in candidates for name in upstream.forward_headers}
        forward.update(ANTHROPIC_HEADERS)  # (sent on to Messages upstreams only)
        # (a header sent several times goes on as one, its values joined as HTTP allows)
        client_headers = {n: ", ".join(v) for n in forward if (v := request.headers.getlist(n))}
        call = _Call(request_id, model, tenant, body, client_headers)
        noticed = await run_until_disconnect(
            self._serve(send, call, candidates), receive, state.clock, answered=call.answered
        )
        if noticed is not None:
            self._count(model, tenant, call.upstream, "cancelled")
            state.log.info("request %s: the client left; upstream call closed", request_id)

    async def _serve(self, send: Send, call: _Call, candidates: list[UpstreamConfig]) -> None:
        state, clock = self.state, self.state.clock
        candidates = candidates[: state.config.failover.max_attempts]
        last: UpstreamError | None = None
        for index, upstream in enumerate(candidates):
            call.upstream = upstream.name
            deadline = clock.now_ns() + upstream.timeouts.request
            response = None
            try:
                response = await state.pool.post(
                    upstream,
                    self.path,
                    {**call.body, "model": upstream.upstream_model(call.model)},
                    request_id=call.request_id if index == 0 else f"{call.request_id}.f{index}",
                    client_headers=call.client_headers,
                    timeout_s=upstream.timeouts.request / 1e9,
                )
                check_answer(response, upstream.name)
                left_s = max(0.0, (deadline - clock.now_ns()) / 1e9)
                answer = await read_whole(
                    response, upstream.name, left_s, limit=state.config.limits.max_response_bytes
                )
                status, content_type = response.status, media_type(response)
            except UpstreamError as exc:
                last = exc
                following = candidates[index + 1] if index + 1 < len(candidates) else None
                if following is None or not retryable(exc, state.config.failover):
                    break
                state.metrics.passthrough_failovers.labels(self.route, upstream.name).inc()
                state.log.info(
                    "request %s: upstream %s failed (%s) -> %s",
                    call.request_id,
                    upstream.name,
                    state.pool.redact(str(exc)),
                    following.name,
                )
                continue
            finally:
                if response is not None:
                    response.close()
            scrub = state.pool.byte_scrubber()
            if scrub is not None:  # an answer that quotes a key does not pass it on
                answer = scrub(answer)
            if 200 <= status < 300:  # (an embeddings-only model gets a label as a chat one)
                state.model_labels.served(call.model)
            await self._send(send, call, status, answer, content_type)
            return
        assert last is not None
        refused = upstream_refusal(last, state.pool.redact)
        state.metrics.errors.labels(self.route, call.tenant, refused.code).inc()
        state.log.info("request %s: refused: %s", call.request_id, refused.message)
        headers = refusal_headers(last)
        last = None  # its traceback holds this frame: no cycle through the frame's locals
        await self._send(send, call, refused.status, refused.body(self.shape), None, headers)

    async def _send(
        self,
        send: Send,
        call: _Call,
        status: int,
        body: bytes,
        content_type: str | None,
        extra: dict[str, str] | None = None,
    ) -> None:
        headers = [
            (b"content-type", (content_type or "application/json").encode()),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", call.request_id.encode()),
            *((name.encode(), value.encode()) for name, value in (extra or {}).items()),
        ]
        call.sent = True
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self._count(call.model, call.tenant, call.upstream, str(status))

    def _count(self, model: str, tenant: str, upstream: str, status: str) -> None:
        state = self.state
        labels = (state.model_labels.label(model), self.route, tenant, upstream, status)
        state.metrics.passthrough.labels(*labels).inc()


class _Call:
    """One passed-through request on its way: what goes upstream, and how far it got."""

    __slots__ = ("body", "client_headers", "model", "request_id", "sent", "tenant", "upstream")

    def __init__(
        self,
        request_id: str,
        model: str,
        tenant: str,
        body: dict[str, Any],
        client_headers: dict[str, str],
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.tenant = tenant
        self.body = body
        self.client_headers = client_headers
        self.upstream = _NO_UPSTREAM  # the one tried last
        self.sent = False  # the response went out: a disconnect now is no cancellation

    def answered(self) -> bool:
        return self.sent
