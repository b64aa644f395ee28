"""What the streaming and the non-streaming relay share (one base, as client_python's metrics
share ``MetricWrapperBase``): the race with the client's disconnect, the attempts and
failovers on the record, the refusal, and the end of a request (metrics, recording).

Each relay supplies only how it serves (:meth:`Relay._serve`) and what it adds to the record
at the end (:meth:`Relay._close_record`). Failovers are recorded the same way by both: cause
(``failure.cause.value``), ``from``, ``to``, kind and result, logged with upstream text
scrubbed of keys, and counted in ``steadystream_failovers_total`` when the request ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Receive, Scope, Send

from steadystream._exceptions import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
)
from steadystream._types import Outcome
from steadystream.gateway.config import FailoverConfig, UpstreamConfig
from steadystream.gateway.disconnect import run_until_disconnect
from steadystream.gateway.events import Failure
from steadystream.gateway.failover import Action
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.refusal import send_refusal
from steadystream.gateway.requests import ProxyRequest, error_shape
from steadystream.gateway.state import GatewayState, labels_of
from steadystream.gateway.upstreams import ResponseTooLargeError
from steadystream.protocol.apis import API_PATHS

__all__ = ["Relay", "retryable"]


class Relay:
    """The ASGI response of one generation request (see the module docstring)."""

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
        self.clock = state.clock
        self.attempts = 0
        self.committed = False  # the response's status went out
        self.path = API_PATHS[request.route]

    # -- what a relay supplies ----------------------------------------------------------------

    async def _serve(self, scope: Scope, send: Send) -> None:
        raise NotImplementedError

    def answered(self) -> bool:
        """The whole response went out: a disconnect now is no cancellation."""
        raise NotImplementedError

    def _close_record(self) -> None:
        """Add what only this relay knows to the record, before it is written."""

    def _detach(self) -> bool:
        """The client left before the whole answer went out: True when the work goes on
        without it (a resumable stream, gateway/resume), False to cancel it now."""
        return False

    async def _at_shutdown(self, send: Send) -> bool:
        """The server cancelled this request as it shut down (its work is cancelled and
        done): True when the relay ended the response itself, False to let the cancellation
        go on (uvicorn then answers 500, or cuts a response already started)."""
        return False

    # -- the request's life -------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state, record, clock = self.state, self.record, self.clock
        route = record.labels["route"]
        state.metrics.active.labels(route).inc()
        latency: int | None = None
        task = asyncio.current_task()
        if task is not None:
            state.requests.add(task)
        try:
            noticed = await run_until_disconnect(
                self._serve(scope, send),
                receive,
                clock,
                answered=self.answered,
                detach=self._detach,
            )
            if noticed is not None:
                latency = clock.now_ns() - noticed
                record.outcome = Outcome.CANCELLED
                record.error = "the client disconnected"
                record.meta["cancel_latency_ns"] = latency
                record.meta["disconnect_ns"] = record.offset(noticed)
        except asyncio.CancelledError:
            if not state.shutting_down() or not await self._at_shutdown(send):
                raise
            if task is not None:
                task.uncancel()  # ended here: no traceback of a cancel in the server's log
        finally:
            state.requests.discard(task)
            state.metrics.active.labels(route).dec()
            self._finish(latency)

    def _finish(self, cancel_latency: int | None) -> None:
        state, record = self.state, self.record
        metrics = state.metrics
        labels = labels_of(record, state.model_labels)
        if cancel_latency is not None:
            metrics.cancellations.labels(*labels).inc()
            metrics.cancel_latency.observe((labels[1],), cancel_latency / 1e9)
        if record.outcome is Outcome.CLIENT_STUCK:
            metrics.client_stuck.labels(*labels).inc()
        for entry in record.failovers:
            if entry["result"] == "pending":
                entry["result"] = "cancelled"
            metrics.failovers.labels(*labels, entry["kind"], entry["result"]).inc()
        try:
            self._close_record()
            state.finish_record(record, self.clock.now_ns())
        except Exception:  # measurement must never break a response that already went out
            state.log.exception("request %s: could not record the stream", record.request_id)

    # -- attempts and failovers ---------------------------------------------------------------

    def begin_attempt(self, upstream: UpstreamConfig, action: Action) -> dict[str, Any]:
        """Put the next upstream request on the record; its entry (request id included)."""
        record = self.record
        index = self.attempts
        self.attempts += 1
        request_id = record.request_id if index == 0 else f"{record.request_id}.f{index}"
        info: dict[str, Any] = {
            "upstream": upstream.name,
            "request_id": request_id,
            "action": action.value,
            "sent_ns": record.offset(self.clock.now_ns()),
        }
        record.attempts.append(info)
        record.labels["upstream"] = upstream.name
        return info

    def retryable(self, error: UpstreamError) -> bool:
        """Whether a refusal before anything was sent may go to the next upstream."""
        return retryable(error, self.state.config.failover)

    def note_failover(
        self,
        upstream: UpstreamConfig,
        failure: Failure,
        kind: str,
        target: UpstreamConfig | None,
        *,
        after_tokens: int = 0,
    ) -> dict[str, Any]:
        """Put a failover on the timeline (point, cause, upstream, result) and in the log.

        ``kind`` is retry, continue, regenerate, or the policy when it ends in an error;
        the result is filled in when known: completed, failed, diverged, error, cancelled.
        The message came from outside (an upstream's text): it is scrubbed of keys here.
        """
        record = self.record
        message = self.state.pool.redact(failure.message)
        entry: dict[str, Any] = {
            "at_ns": record.offset(self.clock.now_ns()),
            "after_tokens": after_tokens,
            "cause": failure.cause.value,
            "message": message,
            "from": upstream.name,
            "to": target.name if target is not None else None,
            "kind": kind,
            "result": "pending" if target is not None else "error",
        }
        record.failovers.append(entry)
        self.state.log.info(
            "request %s: upstream %s failed (%s: %s) -> %s %s",
            record.request_id,
            upstream.name,
            failure.cause.value,
            message,
            kind,
            entry["to"] or "in-band error",
        )
        return entry

    async def refuse(self, send: Send, error: UpstreamError) -> None:
        """Pass the last upstream refusal on, before anything else was sent."""
        shape = error_shape(API_PATHS[self.request.route])  # the client's API, not the upstream's
        await send_refusal(send, self.state, self.record, error, shape)


def retryable(error: UpstreamError, failover: FailoverConfig) -> bool:
    """Whether an upstream's failure before the client got anything may go to the next
    upstream: a connection not made, a body broken off, or a status of ``retry_statuses``;
    never an answer too large (another upstream would give as much)."""
    if not failover.before_first_token or isinstance(error, ResponseTooLargeError):
        return False
    if isinstance(error, UpstreamStatusError):
        return error.status in failover.retry_statuses
    return isinstance(error, UpstreamConnectError | UpstreamStreamError)
