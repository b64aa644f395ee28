"""Non-streaming requests: forwarded whole, with the same failover before any byte is sent.

Nothing reaches the client before the upstream's answer is complete, so every failure can
still try the next upstream (connect errors, retryable statuses, a broken body, the
upstream's request timeout), and the last refusal is passed on with its status and message.
A client that leaves closes the upstream request too.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from steadystream._exceptions import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
)
from steadystream._types import EventKind, Outcome
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.disconnect import run_until_disconnect
from steadystream.gateway.events import Piece
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.refusal import send_refusal
from steadystream.gateway.requests import ProxyRequest
from steadystream.gateway.state import GatewayState, labels_of
from steadystream.gateway.upstreams import build_body, read_whole

__all__ = ["WholeRelay"]


class WholeRelay:
    """The ASGI response of one non-streaming request."""

    def __init__(
        self,
        state: GatewayState,
        request: ProxyRequest,
        record: StreamRecord,
        candidates: list[UpstreamConfig],
        *,
        client_headers: dict[str, str],
    ) -> None:
        self.state = state
        self.request = request
        self.record = record
        self.candidates = candidates
        self.client_headers = client_headers
        self._path = "/chat/completions" if request.chat else "/completions"
        self.answered = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state, record = self.state, self.record
        clock = state.clock
        route = record.labels["route"]
        state.metrics.active.labels(route).inc()
        try:
            noticed = await run_until_disconnect(
                self._serve(send), receive, clock, answered=lambda: self.answered
            )
            if noticed is not None:
                latency = clock.now_ns() - noticed
                record.outcome = Outcome.CANCELLED
                record.error = "the client disconnected"
                record.meta["cancel_latency_ns"] = latency
                state.metrics.cancellations.labels(*labels_of(record)).inc()
                state.metrics.cancel_latency.observe((route,), latency / 1e9)
        finally:
            state.metrics.active.labels(route).dec()
            try:
                state.finish_record(record, clock.now_ns())
            except Exception:
                state.log.exception("request %s: could not record", record.request_id)

    async def _serve(self, send: Send) -> None:
        state, record = self.state, self.record
        clock = state.clock
        failover = state.config.failover
        last: UpstreamError | None = None
        for index, upstream in enumerate(self.candidates[: failover.max_attempts]):
            request_id = record.request_id if index == 0 else f"{record.request_id}.f{index}"
            record.labels["upstream"] = upstream.name
            sent = clock.now_ns()
            record.attempts.append(
                {
                    "upstream": upstream.name,
                    "request_id": request_id,
                    "sent_ns": record.offset(sent),
                }
            )
            response = None
            deadline = sent + upstream.timeouts.request
            try:
                response = await state.pool.post(
                    upstream,
                    self._path,
                    build_body(self.request, upstream),
                    request_id=request_id,
                    client_headers=self.client_headers,
                    timeout_s=upstream.timeouts.request / 1e9,
                )
                arrived = clock.now_ns()
                left_s = max(0.0, (deadline - clock.now_ns()) / 1e9)
                body = await read_whole(response, upstream.name, left_s)
                content_type = response.headers.get("Content-Type", "application/json")
                status = response.status
            except UpstreamError as exc:
                last = exc
                record.attempts[-1]["error"] = str(exc)
                retryable = isinstance(exc, UpstreamConnectError | UpstreamStreamError) or (
                    isinstance(exc, UpstreamStatusError) and exc.status in failover.retry_statuses
                )
                if not (retryable and failover.before_first_token):
                    break
                record.failovers.append(
                    {
                        "at_ns": record.offset(clock.now_ns()),
                        "after_tokens": 0,
                        "cause": type(exc).__name__,
                        "message": str(exc),
                        "from": upstream.name,
                        "kind": "retry",
                        "result": "failed",
                    }
                )
                continue
            finally:
                if response is not None:
                    response.close()
            await self._answer(send, status, body, content_type, arrived)
            return
        assert last is not None
        self.answered = True
        await send_refusal(send, state, record, last)

    async def _answer(
        self, send: Send, status: int, body: bytes, content_type: str, arrived: int
    ) -> None:
        record = self.record
        clock = self.state.clock
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", record.request_id.encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        self.answered = True
        await send({"type": "http.response.body", "body": body, "more_body": False})
        sent = clock.now_ns()
        text, usage = _answer_text(body)
        for log, t in ((record.upstream, arrived), (record.downstream, sent)):
            offset = record.offset(t)
            log.header_ns = log.first_byte_ns = offset
            if text:
                log.add(offset, Piece(EventKind.CONTENT, text, b"", len(body)))
        record.usage = usage
        record.outcome = Outcome.COMPLETE if len(record.attempts) == 1 else Outcome.FAILED_OVER


def _answer_text(body: bytes) -> tuple[str, dict[str, int] | None]:
    """The answer's text and usage, for the timeline (empty when the body is not a completion)."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", None
    if not isinstance(data, dict):
        return "", None
    usage = data.get("usage")
    counts = (
        {k: v for k, v in usage.items() if isinstance(v, int)} if isinstance(usage, dict) else None
    )
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", counts
    choice = choices[0]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return (text if isinstance(text, str) else ""), counts
