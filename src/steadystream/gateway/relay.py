"""One streamed request, end to end: attempts, the watchdog, failover, and the race with the client.

Shape of a stream (docs/gateway.md#streams)::

    upstream ──reader──► StreamBuffer (bounded) ──writer──► client
                 ▲                                   │
                 └──── guard: watchdog, keepalive, stuck client

- Before the response is committed, upstreams are tried in order; an HTTP error that the
  next upstream cannot fix (a 400, say) is passed through with its status and message.
- The 200 is committed when an upstream answers 200. From then on every failure ends with an
  OpenAI-style in-band error event and ``[DONE]``; a stream is never silently truncated.
- The reader forwards upstream bytes as they came, cut at event boundaries
  (:class:`~steadystream.gateway.events.EventCutter`); a fallback's events are rewritten.
- The guard task owns the timers: the watchdog's deadline (pure logic in ``watchdog``),
  SSE keepalives before the first token, and the stuck-client cut.
- The whole thing races the client's disconnect (``disconnect``); whichever way it ends, the
  upstream response is closed explicitly in ``finally``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Receive, Scope, Send

from steadystream._exceptions import UpstreamConnectError, UpstreamError, UpstreamStatusError
from steadystream._types import EventKind, Outcome
from steadystream.gateway.attempt import Attempt, cause_of, read_attempt
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.disconnect import run_until_disconnect
from steadystream.gateway.events import ChunkFormat, Failure, FallbackRewriter, Piece
from steadystream.gateway.failover import (
    Action,
    Cause,
    Decision,
    Policy,
    PrefixMatcher,
    Progress,
    decide,
)
from steadystream.gateway.guard import Guard
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.refusal import send_refusal
from steadystream.gateway.requests import ProxyRequest
from steadystream.gateway.state import GatewayState, labels_of
from steadystream.gateway.upstreams import build_body
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import Out, RawOutlet, write_paced, write_raw
from steadystream.shaping import Pacer

__all__ = ["StreamRelay"]

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_DONE_PIECE = Piece(None, "", b"", 0)


class StreamRelay:
    """The ASGI response of one streaming request."""

    def __init__(
        self,
        state: GatewayState,
        request: ProxyRequest,
        record: StreamRecord,
        candidates: list[UpstreamConfig],
        *,
        pacer: Pacer | None,
        client_headers: dict[str, str],
    ) -> None:
        config = state.config
        self.state = state
        self.request = request
        self.record = record
        self.candidates = candidates
        self.pacer = pacer
        self.client_headers = client_headers
        self.clock = state.clock
        self.progress = Progress()
        self.buffer: StreamBuffer[Out] = StreamBuffer(
            max_bytes=config.limits.buffer_bytes, max_items=config.limits.buffer_events
        )
        self.stuck = StuckClient(config.limits.stuck_timeout)
        self.envelope: dict[str, Any] | None = None
        self.current: Attempt | None = None
        self.attempts = 0
        self.committed = False
        self.answered = False  # [DONE] (or a refusal) went out: a disconnect is no cancel
        self.guard = Guard(self)
        self.outlet: RawOutlet | None = None  # set when the stream is relayed unpaced
        self.transport: asyncio.WriteTransport | None = None  # the client's, when known
        self.usage_base = 0  # a continuation's running usage counts from here
        self._main: asyncio.Task[Any] | None = None
        self._children: list[asyncio.Task[Any]] = []
        self._path = "/chat/completions" if request.chat else "/completions"

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state, record, clock = self.state, self.record, self.clock
        route = record.labels["route"]
        state.metrics.active.labels(route).inc()
        latency: int | None = None
        try:
            noticed = await run_until_disconnect(
                self._serve(scope, send), receive, clock, answered=lambda: self.answered
            )
            if noticed is not None:
                latency = clock.now_ns() - noticed
                record.outcome = Outcome.CANCELLED
                record.error = "the client disconnected"
                record.meta["cancel_latency_ns"] = latency
                record.meta["disconnect_ns"] = record.offset(noticed)
        finally:
            state.metrics.active.labels(route).dec()
            self._finish(latency)
        transport = self.transport
        if record.outcome is Outcome.CLIENT_STUCK and transport is not None:
            # Drop the connection of a client that stopped reading (the server would
            # otherwise close it after complaining that the response was cut short), and
            # let the server see it go before returning.
            transport.abort()
            for _ in range(3):
                await asyncio.sleep(0)

    def _finish(self, cancel_latency: int | None) -> None:
        state, record = self.state, self.record
        metrics = state.metrics
        labels = labels_of(record)
        record.meta["buffer_peak_bytes"] = self.buffer.peak_bytes
        record.meta["buffer_waits"] = self.buffer.waits
        metrics.buffer_peak.observe((labels[1],), self.buffer.peak_bytes)
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
            state.finish_record(record, self.clock.now_ns())
        except Exception:  # measurement must never break a response that already went out
            state.log.exception("request %s: could not record the stream", record.request_id)

    # -- the stream -------------------------------------------------------------------------

    async def _serve(self, scope: Scope, send: Send) -> None:
        self._main = asyncio.current_task()
        try:
            attempt = await self._first_attempt(send)
            if attempt is None:
                return
            await self._commit(send)
            find = self.state.transport_of
            self.transport = find(scope) if find is not None else None
            if self.pacer is None:
                self.outlet = RawOutlet(self, send, self.transport)
                self._spawn(write_raw(self, send))
            else:
                self._spawn(write_paced(self, send))
            self._spawn(self.guard.run())
            try:
                await self._run(attempt)
            except Exception as exc:
                self.state.log.exception("request %s: relay failed", self.record.request_id)
                await self._end_with_error(f"the gateway failed: {type(exc).__name__}", "internal")
            self.buffer.close()
            await asyncio.wait({self._children[0]})
            self.answered = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            # Close upstream first (the engine frees the sequence on it), then the helpers.
            current = self.current
            if current is not None:
                current.close(clean=False)
            for task in self._children:
                if not task.done():
                    task.cancel()
            if self._children:
                await asyncio.wait(self._children)

    def cancel(self) -> None:
        """End the stream now (a stuck client): ``finally`` closes the upstream."""
        if self._main is not None:
            self._main.cancel()

    def _spawn(self, coro: Any) -> None:
        self._children.append(asyncio.ensure_future(coro))

    async def _commit(self, send: Send) -> None:
        headers = [*_SSE_HEADERS, (b"x-request-id", self.record.request_id.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        self.committed = True
        self.record.downstream.header_ns = self.record.offset(self.clock.now_ns())

    async def _first_attempt(self, send: Send) -> Attempt | None:
        """Open upstreams in order until one answers 200; None when an error was returned."""
        config = self.state.config
        last: UpstreamError | None = None
        for upstream in self.candidates[: config.failover.max_attempts]:
            try:
                return await self._open(upstream, Action.RETRY)
            except UpstreamError as exc:
                last = exc
                retryable = isinstance(exc, UpstreamConnectError) or (
                    isinstance(exc, UpstreamStatusError)
                    and exc.status in config.failover.retry_statuses
                )
                if not (retryable and config.failover.before_first_token):
                    break
                self._note_failover(upstream, Failure(cause_of(exc), str(exc)), "retry", None)
        assert last is not None
        self.answered = True
        await send_refusal(send, self.state, self.record, last)
        return None

    async def _open(self, upstream: UpstreamConfig, action: Action) -> Attempt:
        """Send the request for ``action`` to ``upstream``; the attempt once headers are in."""
        config = self.state.config
        index = self.attempts
        self.attempts += 1
        request_id = self.record.request_id if index == 0 else f"{self.record.request_id}.f{index}"
        timeouts = upstream.timeouts
        watchdog = Watchdog(
            first_token_ns=timeouts.first_token or config.watchdog.first_token_timeout,
            stall_ns=timeouts.stall or config.watchdog.stall_timeout,
        )
        attempt = Attempt(upstream, index, request_id, watchdog)
        attempt.action = action
        attempt.cutter.keep_raw = self.pacer is not None
        body = build_body(self.request, upstream, action, self.progress)
        sent = self.clock.now_ns()
        watchdog.start(sent)
        info: dict[str, Any] = {
            "upstream": upstream.name,
            "request_id": request_id,
            "action": action.value,
            "sent_ns": self.record.offset(sent),
        }
        self.record.attempts.append(info)
        self.record.labels["upstream"] = upstream.name
        try:
            response = await self.state.pool.post(
                upstream,
                self._path,
                body,
                request_id=request_id,
                client_headers=self.client_headers,
                timeout_s=watchdog.first_token_ns / 1e9,
            )
        except UpstreamError as exc:
            info["error"] = str(exc)
            raise
        now = self.clock.now_ns()
        info["header_ns"] = self.record.offset(now)
        if self.record.upstream.header_ns is None:
            self.record.upstream.header_ns = info["header_ns"]
        attempt.response = response
        self.current = attempt
        self.guard.poke()
        return attempt

    async def _run(self, attempt: Attempt) -> None:
        """Relay ``attempt`` and whatever failovers follow, until the stream is over."""
        config = self.state.config
        policy = Policy(config.failover.policy)
        while True:
            failure = await self._pump(attempt)
            attempt.close(clean=failure is None)
            entry = attempt.entry
            if failure is None:
                if entry is not None:
                    entry["result"] = "completed"
                self.record.outcome = (
                    Outcome.COMPLETE if self.attempts == 1 else Outcome.FAILED_OVER
                )
                return
            self.record.attempts[-1]["failure"] = failure.cause.value
            if entry is not None:
                entry["result"] = "diverged" if failure.cause is Cause.DIVERGED else "failed"
            if failure.cause is Cause.DIVERGED:
                await self._end_with_error(
                    f"the fallback upstream {attempt.upstream.name!r} gave a different answer "
                    "than the one already sent; stopping here rather than contradict it",
                    "failover_diverged",
                )
                return
            while True:
                decision = self._decide()
                kind = policy.value if decision.action is Action.ERROR else decision.action.value
                note = self._note_failover(attempt.upstream, failure, kind, decision.upstream)
                if decision.action is Action.ERROR or decision.upstream is None:
                    await self._end_with_error(
                        f"upstream {attempt.upstream.name!r} failed "
                        f"({failure.cause.value}: {failure.message}); {decision.reason}",
                        f"upstream_{failure.cause.value.replace('-', '_')}",
                    )
                    return
                try:
                    attempt = await self._open(decision.upstream, decision.action)
                except UpstreamError as exc:
                    note["result"] = "failed"
                    failure = Failure(cause_of(exc), str(exc))
                    self.record.attempts[-1]["failure"] = failure.cause.value
                    continue
                break
            attempt.entry = note
            label = f"{failure.cause.value}:{decision.action.value}:{decision.upstream.name}"
            self.record.upstream.mark_next(label)
            self.record.downstream.mark_next(label)
            matcher = None
            if decision.action is Action.REGENERATE:
                matcher = PrefixMatcher(self.progress.content_text, self.progress.reasoning_text)
            self.usage_base = self.progress.tokens if decision.action is Action.CONTINUE else 0
            attempt.cutter.keep_raw = True  # rewritten events are re-sent one by one
            attempt.rewriter = FallbackRewriter(
                self.envelope, role_sent=self.progress.role_sent, matcher=matcher
            )

    def _decide(self) -> Decision:
        """What a failure of the current attempt would lead to, now."""
        config = self.state.config
        tried = {info["upstream"] for info in self.record.attempts}
        left = [u for u in self.candidates if u.name not in tried]
        decision = decide(
            Policy(config.failover.policy),
            self.progress,
            left,
            chat=self.request.chat,
            retry_before_first_token=config.failover.before_first_token,
            attempts_left=config.failover.max_attempts - self.attempts,
            continuable_prompt=self.request.prompt_is_text and self.request.choices == 1,
        )
        if self.request.choices != 1 and self.progress.first_token:
            decision = Decision(Action.ERROR, reason="n > 1 is not failed over")
        return decision

    def waits_out_stall(self) -> bool:
        """Whether a mid-stream stall should be waited out rather than end the stream.

        Failing over is the remedy for a stall; where there is no fallback, ending the stream
        would turn a pause the user may sit through into an answer cut short. Policy ``off``
        asks for the cut, and a first token that never comes is not waited for forever.
        """
        failover = self.state.config.failover
        return (
            failover.wait_without_fallback
            and failover.policy != Policy.OFF.value
            and self.progress.first_token
            and self._decide().action is Action.ERROR
        )

    def _note_failover(
        self,
        upstream: UpstreamConfig,
        failure: Failure,
        kind: str,
        target: UpstreamConfig | None,
    ) -> dict[str, Any]:
        """Put a failover on the timeline (point, cause, upstream, result) and in the log.

        ``kind`` is retry, continue, regenerate, or the policy when it ends in an error;
        the result is filled in when known: completed, failed, diverged, error, cancelled.
        """
        now = self.clock.now_ns()
        entry: dict[str, Any] = {
            "at_ns": self.record.offset(now),
            "after_tokens": self.progress.text_events,
            "cause": failure.cause.value,
            "message": failure.message,
            "from": upstream.name,
            "to": target.name if target is not None else None,
            "kind": kind,
            "result": "pending" if target is not None else "error",
        }
        if not self.committed:  # a refused first try: the next upstream is simply next
            entry["result"] = "failed"
        self.record.failovers.append(entry)
        self.state.log.info(
            "request %s: upstream %s failed (%s: %s) -> %s %s",
            self.record.request_id,
            upstream.name,
            failure.cause.value,
            failure.message,
            kind,
            entry["to"] or "in-band error",
        )
        return entry

    async def _pump(self, attempt: Attempt) -> Failure | None:
        """Run the reader of ``attempt``; the guard may stop it (a stall)."""
        task = asyncio.ensure_future(read_attempt(self, attempt))
        attempt.task = task
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():
                task.cancel()
        if task.cancelled():
            return attempt.failure or Failure(Cause.STALL, "stopped by the watchdog")
        return task.result()

    async def _end_with_error(self, message: str, code: str) -> None:
        """End the committed stream with an OpenAI-style error event and ``[DONE]``."""
        message = self.state.pool.redact(message)
        data = ChunkFormat.error(message, code)
        piece = Piece(EventKind.ERROR, "", data, len(data))
        self.record.outcome = Outcome.ERROR
        self.record.error = message
        labels = self.record.labels
        self.state.metrics.errors.labels(labels["route"], labels["tenant"], "in_band").inc()
        self.state.log.warning("request %s: %s", self.record.request_id, message)
        if not self.buffer.closed:
            await self.buffer.put(Out(data, [piece, _DONE_PIECE]), len(data))
