"""One streamed request, end to end: attempts, the watchdog, failover, and the race with the client.

Shape of a stream (docs/gateway.md#streams)::

    upstream ──line──► client, while it keeps up
               └─────► StreamBuffer (bounded) ──writer──► client, when it does not
                 ▲                                   │
                 └──── guard: watchdog, keepalive, stuck client

- Before the response is committed, upstreams are tried in order; an HTTP error that the
  next upstream cannot fix (a 400, say) is passed through with its status and message.
- The 200 is committed when an upstream answers 200. From then on every failure ends with an
  OpenAI-style in-band error event and ``[DONE]``; a stream is never silently truncated.
- The line (``line``) takes each upstream read in the socket's read callback and forwards
  its bytes as they came, cut at event boundaries (a fallback's events rewritten), to the
  client or into the buffer; the writers (``writers``) send what waits and stamp. The guard
  (``guard``) owns the timers. They share a :class:`StreamContext`; the relay decides.
- The whole thing races the client's disconnect (``base``); whichever way it ends, the
  upstream response is closed explicitly in ``finally``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.types import Scope, Send

from steadystream._exceptions import UpstreamError
from steadystream._types import EventKind, Outcome
from steadystream.gateway.attempt import Attempt, UpstreamBody, cause_of, read_attempt
from steadystream.gateway.base import Relay
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import (
    KEEPALIVE,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_WRITE_S,
    SSE_HEADERS,
    ChunkFormat,
    Failure,
    FallbackRewriter,
    Piece,
)
from steadystream.gateway.failover import Action, Cause, Decision, Policy, PrefixMatcher, decide
from steadystream.gateway.guard import Guard, GuardHooks
from steadystream.gateway.line import StreamLine, line_build
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.requests import ProxyRequest
from steadystream.gateway.resume.hub import REFUSED, STREAM_ID_HEADER, LiveStream
from steadystream.gateway.state import GatewayState, labels_of
from steadystream.gateway.translation import StreamTranslator, stream_translator, upstream_api
from steadystream.gateway.translation.responses import failed_after
from steadystream.gateway.unstreamed import answered_whole, read_unstreamed
from steadystream.gateway.upstreams import build_body
from steadystream.gateway.watchdog import StallKind, Watchdog
from steadystream.gateway.writers import RawOutlet, unsent_bytes, write_paced, write_raw
from steadystream.protocol import Dialect
from steadystream.protocol.apis import API_PATHS, Api, new_dialect
from steadystream.protocol.responses import ResponsesDialect
from steadystream.protocol.sse import DONE
from steadystream.shaping import Pacer

__all__ = ["StreamRelay"]

_DONE_PIECE = Piece(None, "", DONE, len(DONE))  # the gateway's own end of an answer
_DONE_MARK = Piece(None, "", b"", 0)  # the end, its bytes already in the event before it
_KEEPALIVE_OUT = Out(KEEPALIVE, [Piece(EventKind.KEEPALIVE, "", KEEPALIVE, len(KEEPALIVE))])


class StreamRelay(Relay):
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
        live: LiveStream | None = None,
    ) -> None:
        super().__init__(state, request, record, candidates, client_headers=client_headers)
        limits = state.config.limits
        self.pacer = pacer
        # With resume (gateway/resume): the stream's ids, its kept events, its grace.
        self.live = live
        self.stopped = False  # cancelled for the stream's sake (DELETE, grace), not a fault
        buffer: StreamBuffer[Out] = StreamBuffer(
            max_bytes=limits.buffer_bytes, max_events=limits.buffer_events
        )
        self.ctx = StreamContext(
            self.clock,
            record,
            buffer,
            StuckClient(limits.stuck_timeout),
            scrub=state.pool.byte_scrubber(),
        )
        self.current: Attempt | None = None
        self.outlet: RawOutlet | None = None  # set when the stream is relayed unpaced
        self.line: StreamLine | None = None  # set once the response is committed
        self.build = line_build()  # the line's build this stream runs on (gateway/line.py)
        self.dialect: Dialect | None = None  # the current attempt's (_new_dialect)
        self.translator: StreamTranslator | None = None  # the current attempt's, if translated
        self.transport: asyncio.WriteTransport | None = None  # the client's, when known
        self.guard = Guard(
            self.clock,
            self.ctx.stuck,
            GuardHooks(
                watchdog=self._watched,
                first_token=lambda: self.ctx.progress.first_token,
                keepalive=self._keepalive,
                waits_out_stall=self.waits_out_stall,
                stop_read=self._stop_read,
                count_stall=self._count_stall,
                cut_client=self._cut_client,
                unsent=lambda: unsent_bytes(self.transport),
            ),
            keepalive_ns=limits.keepalive_interval,
            give_up_ns=state.config.watchdog.give_up_timeout,
        )
        self.ctx.wake_guard = self.guard.poke
        if live is not None:
            live.cancel = self._stop
            progress = self.ctx.progress
            live.tokens = lambda: progress.tokens
        self._main: asyncio.Task[Any] | None = None
        self._children: list[asyncio.Task[Any]] = []

    def answered(self) -> bool:
        return self.ctx.answered

    async def __call__(self, scope: Any, receive: Any, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
            transport = self.transport
            cut = self.record.outcome is Outcome.CLIENT_STUCK or self.stopped
            if cut and transport is not None and not transport.is_closing():
                # Drop the connection of a client that stopped reading (the server would
                # otherwise close it after complaining that the response was cut short),
                # and let the server see it go before returning.
                transport.abort()
                for _ in range(3):
                    await asyncio.sleep(0)
        finally:
            # The guard's hooks and the line's lead back here: without this, every stream
            # would leave a reference cycle for the garbage collector to find (docs/deploy.md).
            self.guard.release()
            if self.line is not None:
                self.line.release()
            if self.live is not None:  # (refused: nothing was streamed; nothing to resume)
                self.live.ended(self.record.outcome.value if self.committed else REFUSED)

    async def refuse(self, send: Send, error: UpstreamError) -> None:
        if self.live is not None:
            # Ended before the client hears of it: the same request sent again at once is a
            # new request (its Idempotency-Key is free), not a join of this one.
            await self.live.hub.refused(self.live)
        await super().refuse(send, error)

    def _close_record(self) -> None:
        record, buffer = self.record, self.ctx.buffer
        record.meta["buffer_peak_bytes"] = buffer.peak_bytes
        record.meta["buffer_waits"] = buffer.waits
        self.state.metrics.buffer_peak.observe((record.labels["route"],), buffer.peak_bytes)
        if self.attempts > 1 and record.usage is not None:
            # The usage the client got describes its answer; each upstream billed its own.
            record.meta["usage"] = {
                "delivered": record.usage,
                "billed": [
                    {"upstream": info["upstream"], **info.get("usage", {})}
                    for info in record.attempts
                ],
            }

    # -- the stream -------------------------------------------------------------------------

    async def _serve(self, scope: Scope, send: Send) -> None:
        self._main = asyncio.current_task()
        ctx = self.ctx
        try:
            attempt = await self._first_attempt(send)
            if attempt is None:
                return
            await self._commit(send)
            find = self.state.client_link
            link = find(scope, send) if find is not None else None
            self.transport = link.transport if link is not None else None
            live = self.live
            stamp = None if live is None else live.tee.stamp
            if self.pacer is None:
                self.outlet = RawOutlet(
                    ctx, send, self.transport, chunks=link is not None and link.frames
                )
                self._spawn(write_raw(ctx, self.outlet))
            else:
                limits = self.state.config.limits
                self._spawn(
                    write_paced(
                        ctx,
                        send,
                        self.pacer,
                        chat=self.request.chat,
                        high_watermark=limits.pacer_high_watermark,
                        low_watermark=limits.pacer_low_watermark,
                        stamp=stamp,
                    )
                )
            self.line = self.build.StreamLine(
                ctx, self.outlet, stamp if self.pacer is None else None
            )
            self._spawn(self.guard.run())
            try:
                await self._run(attempt)
            except Exception as exc:
                self.state.log.exception("request %s: relay failed", self.record.request_id)
                await self._end_with_error(f"the gateway failed: {type(exc).__name__}", "internal")
            ctx.buffer.close()
            await asyncio.wait({self._children[0]})
            ctx.answered = True
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
            # A cancelled task keeps its CancelledError, whose traceback keeps the task's
            # frames, whose ``self`` leads back here: let go of the tasks, or each stream
            # would leave a cycle for the garbage collector (docs/deploy.md).
            self._children.clear()
            self._main = None

    def _spawn(self, coro: Any) -> None:
        self._children.append(asyncio.ensure_future(coro))

    async def _commit(self, send: Send) -> None:
        record = self.record
        headers = [*SSE_HEADERS, (b"x-request-id", record.request_id.encode())]
        if self.live is not None:
            headers.append((STREAM_ID_HEADER.lower().encode(), self.live.stream_id.encode()))
        glass = self.state.glass_tokens
        if glass is not None:  # the page's glass report on this stream must bring it back
            headers.append(glass.header(record.request_id, record.labels["tenant"]))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        self.committed = True
        self.record.downstream.header_ns = self.record.offset(self.clock.now_ns())

    async def _first_attempt(self, send: Send) -> Attempt | None:
        """Open upstreams in order until one answers 200; None when an error was returned."""
        candidates = self.candidates[: self.state.config.failover.max_attempts]
        last: UpstreamError | None = None
        note: dict[str, Any] | None = None
        for index, upstream in enumerate(candidates):
            try:
                attempt = await self._open(upstream, Action.RETRY)
            except UpstreamError as exc:
                last = exc
                if note is not None:
                    note["result"] = "failed"
                following = candidates[index + 1] if index + 1 < len(candidates) else None
                if following is None or not self.retryable(exc):
                    break
                failure = Failure(cause_of(exc), str(exc))
                note = self.note_failover(upstream, failure, "retry", following)
                continue
            attempt.entry = note
            return attempt
        assert last is not None
        self.ctx.answered = True
        try:
            await self.refuse(send, last)
        finally:
            last = None  # its traceback holds this frame: no cycle through the frame's locals
        return None

    async def _open(self, upstream: UpstreamConfig, action: Action) -> Attempt:
        """Send the request for ``action`` to ``upstream``; the attempt once headers are in."""
        config = self.state.config
        timeouts = upstream.timeouts
        watchdog = Watchdog(
            first_token_ns=timeouts.first_token or config.watchdog.first_token_timeout,
            stall_ns=timeouts.stall or config.watchdog.stall_timeout,
            finish_ns=config.watchdog.finish_timeout,
        )
        info = self.begin_attempt(upstream, action)
        route = self.request.route
        api = upstream_api(upstream, route) or route  # (the app took only upstreams that can)
        if api != route:
            info["api"] = api  # translated: the API the upstream was called in
        attempt = Attempt(
            upstream,
            self.attempts - 1,
            info["request_id"],
            watchdog,
            self.build.EventCutter(
                max_event_bytes=config.limits.max_event_bytes,
                # (the stream's bound, less what earlier attempts relayed)
                max_stream_events=max(
                    0, config.limits.max_stream_events - len(self.record.upstream)
                ),
                dialect=self._new_dialect(api),
            ),
            choices=self.request.choices,
        )
        attempt.action = action
        # Each piece's payload is kept where it is re-sent or re-read: paced, or translated
        # (a chunk of reasoning and content, or of choices, is split by its payload).
        attempt.cutter.keep_raw = self.pacer is not None or api != route
        body = build_body(self.request, upstream, action, self.ctx.progress)
        watchdog.start(self.clock.now_ns())
        try:
            connection = await self.state.pool.post_stream(
                upstream,
                API_PATHS[api],
                body,
                request_id=attempt.request_id,
                client_headers=self.client_headers,
                timeout_s=watchdog.first_token_ns / 1e9,
                clock=self.clock,
            )
            response: UpstreamBody = connection
            head = await connection.head()
            if answered_whole(head):  # (a server that does not stream)
                response = await read_unstreamed(
                    connection,
                    api,
                    name=upstream.name,
                    limit=config.limits.max_response_bytes,
                    timeout_s=watchdog.stall_ns / 1e9,
                    now_ns=self.clock.now_ns,
                    usage=_asks_usage(body),
                )
        except UpstreamError as exc:
            info["error"] = self.state.pool.redact(str(exc))
            raise
        self.state.model_labels.served(self.request.model)
        info["header_ns"] = self.record.offset(self.clock.now_ns())
        if self.record.upstream.header_ns is None:
            self.record.upstream.header_ns = info["header_ns"]
        attempt.response = response
        self.current = attempt
        if api == route:
            self.translator = None
        elif self.translator is None:
            self.translator = self._translator()
        # (else the stream's translator goes on: it sent the opening events, no token, and
        # numbers this upstream's on from them: _decide)
        attempt.rewriter = self.translator
        self.guard.poke()
        return attempt

    def _translator(self) -> StreamTranslator:
        """A new translator of a chat stream into the client's API (gateway/translation)."""
        request = self.request
        return stream_translator(
            request.route,
            self.record.request_id,
            model=request.model,
            created=int(time.time()),
            request=request.body,
            max_text=self.state.config.limits.max_response_bytes,
        )

    async def _run(self, attempt: Attempt) -> None:
        """Relay ``attempt`` and whatever failovers follow, until the stream is over."""
        policy = Policy(self.state.config.failover.policy)
        progress = self.ctx.progress
        while True:
            failure = await self._pump(attempt)
            if failure is not None and failure.cause is Cause.SILENT_AFTER_FINISH:
                await self._end_after_finish(attempt, failure)
                return
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
            if failure.cause is Cause.STREAM_TOO_LONG:  # (a fallback would go on from here)
                await self._end_with_error(
                    f"upstream {attempt.upstream.name!r}: {failure.message}", "stream_too_long"
                )
                return
            while True:
                decision = self._decide()
                kind = policy.value if decision.action is Action.ERROR else decision.action.value
                note = self.note_failover(
                    attempt.upstream,
                    failure,
                    kind,
                    decision.upstream,
                    after_tokens=progress.text_events,
                )
                if decision.action is Action.ERROR or decision.upstream is None:
                    await self._end_with_error(
                        f"upstream {attempt.upstream.name!r} failed "
                        f"({failure.cause.value}: {failure.message}); {decision.reason}",
                        # (upstream_stall, upstream_reset; the upstream's own error event:
                        # upstream_error, not upstream_upstream_error)
                        "upstream_"
                        + failure.cause.value.removeprefix("upstream-").replace("-", "_"),
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
                matcher = PrefixMatcher(progress.content_text, progress.reasoning_text)
            attempt.usage_base = progress.tokens if decision.action is Action.CONTINUE else 0
            if self.request.typed:
                continue  # the client had none of the first: the new stream goes as it comes
            attempt.cutter.keep_raw = True  # rewritten events are re-sent one by one
            attempt.rewriter = FallbackRewriter(
                self.ctx.envelope,
                role_sent=progress.role_sent,
                matcher=matcher,
                usage_base=attempt.usage_base,
            )

    def _decide(self) -> Decision:
        """What a failure of the current attempt would lead to, now."""
        config = self.state.config
        progress = self.ctx.progress
        tried = {info["upstream"] for info in self.record.attempts}
        left = [u for u in self.candidates if u.name not in tried]
        translator = self.translator
        route = self.request.route
        if translator is not None and translator.started:
            # The client has the gateway's opening events: only an upstream translated too can
            # follow them (a native one would open with its own).
            left = [u for u in left if upstream_api(u, route) != route]
        decision = decide(
            Policy(config.failover.policy),
            progress,
            left,
            chat=self.request.chat,
            retry_before_first_token=config.failover.before_first_token,
            attempts_left=config.failover.max_attempts - self.attempts,
            continuable_prompt=self.request.prompt_is_text and self.request.choices == 1,
        )
        if self.request.choices != 1 and progress.first_token:
            decision = Decision(Action.ERROR, reason="n > 1 is not failed over")
        if self.request.typed and (
            progress.first_token or (translator is None and progress.role_sent)
        ):
            # Its events carry the response's id and numbers: a second stream's cannot follow
            # once a token went out. A translated stream's opening events are the gateway's
            # own, and its translator numbers on whatever upstream the tokens come from: until
            # the first token, another upstream is tried as for chat (transparent). A relayed
            # one's opening came from its upstream, with that upstream's id.
            where = "mid-way" if progress.first_token else "once its upstream's opening went out"
            decision = Decision(Action.ERROR, reason=f"a {route} stream is not failed over {where}")
        return decision

    def _new_dialect(self, api: Api) -> Dialect:
        """The dialect an attempt's events are read in: the API the upstream is called in."""
        self.dialect = new_dialect(api)
        return self.dialect

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
            and self.ctx.progress.first_token
            and self._decide().action is Action.ERROR
        )

    async def _pump(self, attempt: Attempt) -> Failure | None:
        """Run ``attempt``'s body through the line until it ends; the guard may stop it."""
        line = self.line
        assert line is not None
        line.begin(attempt)
        task = asyncio.ensure_future(read_attempt(attempt, line.feed))
        attempt.task = task
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():
                task.cancel()
            attempt.task = None  # its frames refer to the attempt: no cycle through it
        if attempt.ended:
            # The line saw the end ([DONE] or a failure) before anything stopped the wait.
            return attempt.end_failure
        if task.cancelled():
            return attempt.failure or Failure(Cause.STALL, "stopped by the watchdog")
        return task.result()

    # -- the guard's hooks ----------------------------------------------------------------------

    def _watched(self) -> Watchdog | None:
        attempt = self.current
        return attempt.watchdog if attempt is not None and attempt.reading else None

    def _keepalive(self) -> None:
        outlet = self.outlet
        if outlet is None or not outlet.busy:
            self.ctx.buffer.offer(_KEEPALIVE_OUT, _KEEPALIVE_OUT.cost)

    def _stop_read(self, failure: Failure) -> None:
        attempt = self.current
        if attempt is None or attempt.task is None:
            return
        attempt.failure = failure
        attempt.task.cancel()

    def _count_stall(self, kind: StallKind) -> None:
        attempt = self.current
        labels = labels_of(self.record, self.state.model_labels)
        upstream = attempt.upstream.name if attempt is not None else labels[3]
        self.state.metrics.stalls.labels(*labels[:3], upstream, kind.value).inc()

    def _cut_client(self, reason: str) -> None:
        record = self.record
        record.outcome = Outcome.CLIENT_STUCK
        record.error = reason
        self.state.log.warning("request %s: %s; cut", record.request_id, reason)
        if self._main is not None:
            self._main.cancel()  # ``finally`` closes the upstream

    # -- ends -----------------------------------------------------------------------------------

    async def _end_after_finish(self, attempt: Attempt, failure: Failure) -> None:
        """The upstream gave its finish reason, then went silent: end the answer ourselves.

        Everything the client needs is there but the end marker; it gets ``[DONE]``, the
        upstream connection is dropped (not reused), and the record says why.
        """
        attempt.close(clean=False)
        record = self.record
        record.attempts[-1]["failure"] = failure.cause.value
        message = self.state.pool.redact(failure.message)  # it may quote the upstream
        record.meta["ended_by_gateway"] = message
        if attempt.entry is not None:
            attempt.entry["result"] = "completed"
        record.outcome = Outcome.COMPLETE if self.attempts == 1 else Outcome.FAILED_OVER
        self.state.log.info(
            "request %s: upstream %s: %s; [DONE] sent by the gateway",
            record.request_id,
            attempt.upstream.name,
            message,
        )
        if not self.ctx.buffer.closed:
            translator = self.translator
            if translator is None:
                done = Out(ChunkFormat.end(self.request.route), [_DONE_PIECE])
            else:  # the closing events the upstream's [DONE] would have brought
                data = translator.end()
                done = Out(data, [Piece(None, "", data, len(data))])
            done = self._stamped(done)
            await self.ctx.buffer.put(done, done.cost)

    async def _end_with_error(self, message: str, code: str) -> None:
        """End the committed stream with an OpenAI-style error event and ``[DONE]``."""
        data = self._error_event(message, code)
        if not self.ctx.buffer.closed:
            piece = Piece(EventKind.ERROR, "", data, len(data))
            out = self._stamped(Out(data, [piece, _DONE_MARK]))
            await self.ctx.buffer.put(out, out.cost, 2)

    def _error_event(self, message: str, code: str) -> bytes:
        """The in-band error that ends the stream, in its client's dialect; the record, the
        metrics and the log say so. ``message`` is scrubbed of keys here."""
        message = self.state.pool.redact(message)
        translator = self.translator
        if translator is not None:  # numbered on from what the translator sent
            data = translator.error(message, code)
        elif isinstance(self.dialect, ResponsesDialect):  # the upstream's own Responses stream
            dialect = self.dialect
            sequence = dialect.last_sequence_number
            data = failed_after(
                dialect.envelope,
                self.request.body,
                sequence,
                message,
                code,
                ident=self.record.request_id,
            )
        else:
            data = ChunkFormat.error(message, code, self.request.route)
        self.record.outcome = Outcome.ERROR
        self.record.error = message
        labels = self.record.labels
        self.state.metrics.errors.labels(labels["route"], labels["tenant"], "in_band").inc()
        self.state.log.warning("request %s: %s", self.record.request_id, message)
        return data

    async def _at_shutdown(self, send: Send) -> bool:
        """The server is shutting down and cancelled this stream (after uvicorn's graceful
        time): end it in-band, as any failure mid-stream is ended, so the client reads why
        and may ask again (or resume through another replica), instead of a body cut short.
        The relay's own ``finally`` has run: the upstream is closed, the writer stopped."""
        if not self.committed or self.ctx.answered or self.stopped:
            return False
        data = self._error_event(SHUTDOWN_MESSAGE, "gateway_shutdown")
        live = self.live
        if live is not None:  # (the writer that stamped the stream's events has stopped)
            data = live.tee.stamp(data)
        self.ctx.answered = True
        try:
            async with asyncio.timeout(SHUTDOWN_WRITE_S):  # (a client that reads nothing)
                await send({"type": "http.response.body", "body": data, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            pass
        return True

    # -- resume (gateway/resume) ----------------------------------------------------------------

    def _stamped(self, out: Out) -> Out:
        """The gateway's own events, with ids and kept, where the line would stamp them."""
        live = self.live
        if live is None or self.pacer is not None:  # (the paced writer stamps what it sends)
            return out
        return Out(live.tee.stamp(out.data), out.pieces)

    def _detach(self) -> bool:
        """The client left mid-answer: True when the generation goes on without it (resume's
        grace; readers may come back), False when it is cancelled now, as without resume."""
        live = self.live
        if live is None or not live.reader_left():
            return False
        self.record.meta["reader_left_ns"] = self.record.offset(self.clock.now_ns())
        return True

    def _stop(self) -> None:
        """Cancel the generation for the stream's sake: ``DELETE``, or no reader came back."""
        record = self.record
        live = self.live
        if self._main is None or self._main.done():
            return
        self.stopped = True
        record.outcome = Outcome.CANCELLED
        if live is not None and live.grace_expired:
            record.error = "no reader came back within resume.grace"
        else:
            record.error = "cancelled by the client (DELETE)"
        record.meta["resume_stop_ns"] = record.offset(self.clock.now_ns())
        self._main.cancel()  # ``finally`` closes the upstream


def _asks_usage(body: dict[str, Any]) -> bool:
    """Whether an upstream request asks for the usage chunk at the end of its stream."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
