"""Writing one plan to the client on its recorded schedule, and noticing when it leaves.

The bytes are the request's API's (a :class:`~steadystream.lab.wire.Wire`: chat and
completions, the Responses API or Anthropic Messages): its opening at the recorded role
offset, one content event per recorded text event (no wire writes reasoning apart, so a
recorded reasoning or tool-call event goes out as content, as it always has), and its closing
at the recorded end.

Each event is written at the request's arrival plus its planned offset, on the injected
clock; events already due when the writer wakes go out together, as a server that fell
behind would send them. The writer races the client's disconnect (the gateway's
:func:`~steadystream.gateway.disconnect.run_until_disconnect`). Every
write is stamped into the request's ground truth (:class:`RequestTruth`, the lab's record),
with the injected delay of each gap as its causes, once it is known to have gone out: a
server drops the writes after a client has left without a word (uvicorn does, and a write
waiting for a slow client's window returns when the client leaves), so after each write the
writer lets the disconnect's listener run and records nothing that was sent after it.

A stall waits for the client to leave, at most ``stall_limit_ns``: then the body ends with no
finish and no ``[DONE]`` (no ``message_stop``, no ``response.completed``), as a truncation
does at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from steadystream._api_errors import ApiError
from steadystream._causes import Cause
from steadystream._clock import Clock
from steadystream._types import EventKind
from steadystream.gateway.disconnect import run_until_disconnect
from steadystream.lab.truth import RequestTruth
from steadystream.lab.wire import Part, Wire
from steadystream.replay.inject import Plan

__all__ = ["ReplayResponse"]

Refuse = Callable[[ApiError, dict[str, str] | None], Response]

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class ReplayResponse(Response):
    """The answer to one request, played from its plan, streamed or whole."""

    def __init__(
        self,
        plan: Plan,
        truth: RequestTruth,
        wire: Wire,
        clock: Clock,
        *,
        stream: bool,
        stall_limit_ns: int,
        refuse: Refuse,
        on_done: Callable[[RequestTruth], None] | None = None,
        on_injected: Callable[[], None] | None = None,
    ) -> None:
        # Response.__init__ is not called: this response writes its own body.
        self.status_code = 200
        self.background = None
        self._plan = plan
        self._truth = truth
        self._wire = wire
        self._clock = clock
        self._stream = stream
        self._stall_limit_ns = stall_limit_ns
        self._refuse = refuse  # a whole answer's error, in its API's shape
        self._on_done = on_done
        self._on_injected = on_injected
        self._extra_headers = [(b"x-request-id", truth.request_id.encode())]
        self._gone_ns: int | None = None  # when the listener saw the client leave

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        truth = self._truth

        async def listened() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and self._gone_ns is None:
                self._gone_ns = self._clock.now_ns()
            return message

        noticed = await run_until_disconnect(
            self._write(send), listened, self._clock, answered=lambda: truth.stream_done
        )
        if noticed is None and self._gone_ns is not None and not truth.stream_done:
            noticed = self._gone_ns  # (the writer saw it first, after a write that was dropped)
        if noticed is not None:
            truth.disconnect_noticed_ns = noticed
            self._finish(noticed, "cancelled")

    def _finish(self, now: int, reason: str) -> None:
        truth = self._truth
        if truth.stream_done:
            return
        truth.finish_reason = reason
        truth.finished_ns = truth.end_ns = now
        truth.stream_done = truth.engine_done = True
        if self._on_done is not None:
            self._on_done(truth)

    async def _delivered(self) -> bool:
        """Whether the client is still there: after a write, that it was there to take it.
        One turn of the loop lets the disconnect's listener see a leaving that dropped it."""
        await asyncio.sleep(0)
        return self._gone_ns is None

    def _mark_content(self, index: int, written_ns: int, wire_bytes: int) -> None:
        """Record content event ``index`` of the plan as written, with its injected causes."""
        plan = self._plan
        extra = plan.extra[index]
        ordered = tuple(sorted(extra, key=lambda cause: -extra[cause]))
        if Cause.INJECTED_FAULT in extra and self._on_injected is not None:
            self._on_injected()
        self._truth.add_event(
            EventKind.CONTENT,
            self._truth.arrival_ns + plan.times[index],
            written_ns,
            plan.tokens[index],
            wire_bytes,
            plan.texts[index],
            ordered,
            {cause.value: extra[cause] for cause in ordered} if extra else None,
        )

    # -- streaming ------------------------------------------------------------------------------

    async def _write(self, send: Send) -> None:
        if not self._stream:
            await self._write_whole(send)
            return
        plan, truth, wire, clock = self._plan, self._truth, self._wire, self._clock
        arrival = truth.arrival_ns
        await clock.sleep_until(arrival + plan.role_ns)
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [*_SSE_HEADERS, *self._extra_headers]})
        opening = wire.opening()
        if opening and not await self._send_parts(send, opening, arrival + plan.role_ns, more=True):
            return
        i, sent = 0, plan.sent
        while i < sent:
            await clock.sleep_until(arrival + plan.times[i])
            now = clock.now_ns()
            due = i + 1
            while due < sent and arrival + plan.times[due] <= now:
                due += 1
            pieces = [wire.content(plan.texts[k]) for k in range(i, due)]
            await send({"type": "http.response.body", "body": b"".join(pieces), "more_body": True})
            written = clock.now_ns()
            if not await self._delivered():
                return
            for k, data in zip(range(i, due), pieces, strict=True):
                self._mark_content(k, written, len(data))
            if truth.first_token_ns is None:
                truth.first_token_ns = written
            truth.tokens_generated = truth.tokens_written
            i = due
        if plan.cut is None:
            await clock.sleep_until(arrival + plan.end_ns)
            text = "".join(plan.texts[:sent])
            before, after = wire.closing("stop", truth.prompt_tokens, truth.tokens_written, text)
            if await self._send_parts(send, [*before, *after], arrival + plan.end_ns, more=False):
                self._finish(clock.now_ns(), "stop")
            return
        if plan.cut == "stall":
            # Nothing more until the client leaves (the listener wins the race) or the deadline.
            await clock.sleep_until(clock.now_ns() + self._stall_limit_ns)
        else:
            cut_at = (
                plan.times[plan.cut_at]
                if plan.cut_at is not None and plan.cut_at < len(plan.times)
                else plan.end_ns
            )
            await clock.sleep_until(arrival + cut_at)
        if await self._delivered():
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self._finish(clock.now_ns(), "reset")

    async def _send_parts(self, send: Send, parts: list[Part], planned: int, *, more: bool) -> bool:
        """Write ``parts`` at once; each but the end marker is an event of the truth. False
        when the client had left (nothing is recorded).

        The last write is checked before it is made, not after: a server reports the
        disconnect of a finished response too, and the truth is finished with no turn of the
        loop between the write and :meth:`_finish`."""
        if not more and not await self._delivered():
            return False
        body = b"".join(data for _, data in parts)
        await send({"type": "http.response.body", "body": body, "more_body": more})
        now = self._clock.now_ns()
        if more and not await self._delivered():
            return False
        for kind, data in parts:
            if kind is not None:
                self._truth.add_event(kind, planned, now, 0, len(data))
        return True

    # -- whole responses ------------------------------------------------------------------------

    async def _write_whole(self, send: Send) -> None:
        plan, truth, wire, clock = self._plan, self._truth, self._wire, self._clock
        arrival = truth.arrival_ns
        status = 200
        if plan.cut == "stall":
            await clock.sleep_until(clock.now_ns() + self._stall_limit_ns)
            status, message = 504, f"replay: stalled ({self._spec_of('stall')})"
        elif plan.cut == "truncate":
            cut_ns = (
                plan.times[plan.cut_at]
                if plan.cut_at is not None and plan.cut_at < len(plan.times)
                else plan.end_ns
            )
            await clock.sleep_until(arrival + cut_ns)
            status, message = 502, f"replay: cut off ({self._spec_of('truncate')})"
        else:
            await clock.sleep_until(arrival + plan.end_ns)
        if self._gone_ns is not None:
            return
        now = clock.now_ns()
        sent = plan.sent
        for k in range(sent):
            self._mark_content(k, now, 0)
        if sent:
            truth.first_token_ns = now
        truth.tokens_generated = truth.tokens_written
        if status == 200:
            text = "".join(plan.texts[:sent])
            body: dict[str, Any] = wire.whole(
                text, "stop", truth.prompt_tokens, truth.tokens_written
            )
            data = orjson.dumps(body)
        else:
            error = ApiError(status, message, type="server_error", code=str(status))
            data = bytes(self._refuse(error, None).body)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            *self._extra_headers,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        self._finish(clock.now_ns(), "stop" if status == 200 else "reset")

    def _spec_of(self, kind: str) -> str:
        for record in self._plan.applied:
            if str(record["spec"]).startswith(kind):
                return str(record["spec"])
        return kind
