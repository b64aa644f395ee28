"""Writing one request's answer to the client, and noticing when the client leaves.

The writer and a disconnect listener run side by side; whichever ends first cancels the
other (as Starlette's ``StreamingResponse`` does). A disconnect tells the engine at once, so
it frees the sequence's KV at the next step boundary; both instants go into the ground truth.
Each write is stamped with the clock right after it was handed to the server: that is the
"actual" time of every event in it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from steadystream._types import EventKind
from steadystream.lab.emission import PlannedEvent
from steadystream.lab.metrics import LabMetrics
from steadystream.lab.stream import Ending, StreamHandle
from steadystream.lab.wire import SseFormat
from steadystream.protocol.openai import error_payload

__all__ = ["ConnectionResetter", "LabResponse"]

ConnectionResetter = Callable[[Scope], Awaitable[bool]]
"""Aborts the TCP connection a request came on (RST); False when it cannot."""

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_JSON_HEADERS = [(b"content-type", b"application/json")]


class _ConnectionAborted(Exception):
    """Raised to make a server without a resetter drop the connection mid-body."""


class LabResponse(Response):
    """The answer to one generation request, streamed or whole."""

    def __init__(
        self,
        handle: StreamHandle,
        wire: SseFormat,
        *,
        stream: bool,
        request_id: str,
        metrics: LabMetrics | None,
        resetter: ConnectionResetter | None,
    ) -> None:
        # Response.__init__ is not called: this response writes its own body.
        self.status_code = 200
        self.background = None
        self._handle = handle
        self._wire = wire
        self._stream = stream
        self._request_id = request_id.encode()
        self._metrics = metrics
        self._resetter = resetter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handle = self._handle
        writer = asyncio.ensure_future(self._write(scope, send))
        listener = asyncio.ensure_future(_wait_for_disconnect(receive, handle.cancel))
        try:
            done, _ = await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (writer, listener):
                if not task.done():
                    task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        if writer in done:
            writer.result()  # re-raise what the writer raised
            return
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await writer
        noticed = handle.truth.disconnect_noticed_ns
        handle.finish(noticed if noticed is not None else handle.clock.now_ns(), "cancelled")

    # -- streaming ------------------------------------------------------------------------------

    async def _write(self, scope: Scope, send: Send) -> None:
        if not self._stream:
            await self._write_whole(scope, send)
            return
        handle, wire, metrics = self._handle, self._wire, self._metrics
        clock = handle.clock
        headers = [*_SSE_HEADERS, (b"x-request-id", self._request_id)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        arrival = handle.truth.arrival_ns
        last_written: int | None = None
        role = wire.role() if wire.chat else b""
        while (batch := await handle.next_write()) is not None:
            texts = [handle.text_of(event) for event in batch]
            contents = [wire.content(text) for text in texts]
            ending = handle.ending
            tail = self._tail(ending) if ending is not None else []
            head = role if last_written is None else b""
            body = b"".join([head, *contents, *(data for _, data in tail)])
            await send({"type": "http.response.body", "body": body, "more_body": True})
            now = clock.now_ns()
            if head:
                handle.mark_other(EventKind.ROLE, now, len(head), batch[0].planned_ns)
            handle.mark_written(batch, now, [len(data) for data in contents], texts)
            if metrics is not None:
                _observe(metrics, len(batch), now, arrival, last_written)
            last_written = now
            if ending is not None:
                await self._end(scope, send, ending, tail, now)
                return
        ending = handle.ending or Ending.SHUTDOWN
        tail = self._tail(ending)
        if tail:
            body = b"".join(data for _, data in tail)
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await self._end(scope, send, ending, tail, clock.now_ns())

    def _tail(self, ending: Ending) -> list[tuple[EventKind | None, bytes]]:
        """What follows the last content: finish, usage and [DONE]; or an error and [DONE]."""
        wire = self._wire
        truth = self._handle.truth
        if ending in (Ending.STOP, Ending.LENGTH):
            tail: list[tuple[EventKind | None, bytes]] = [(EventKind.EMPTY, wire.finish(ending))]
            if wire.include_usage:
                usage = wire.usage(truth.prompt_tokens, truth.tokens_generated)
                tail.append((EventKind.USAGE, usage))
            return [*tail, (None, wire.done())]
        if ending is Ending.ERROR:
            return [(EventKind.ERROR, wire.error("lab fault: error-after")), (None, wire.done())]
        if ending is Ending.SHUTDOWN:
            return [(EventKind.ERROR, wire.error("the lab is shutting down")), (None, wire.done())]
        return []

    async def _end(
        self,
        scope: Scope,
        send: Send,
        ending: Ending,
        tail: list[tuple[EventKind | None, bytes]],
        now: int,
    ) -> None:
        handle = self._handle
        for kind, data in tail:
            if kind is not None:
                handle.mark_other(kind, now, len(data))
        if ending is Ending.RESET:
            handle.finish(now, "reset")
            await self._reset(scope)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        handle.finish(now)

    async def _reset(self, scope: Scope) -> None:
        if self._resetter is not None and await self._resetter(scope):
            return
        raise _ConnectionAborted("lab fault: reset-after")

    # -- whole responses ------------------------------------------------------------------------

    async def _write_whole(self, scope: Scope, send: Send) -> None:
        handle, wire = self._handle, self._wire
        clock = handle.clock
        events: list[PlannedEvent] = []
        while (batch := await handle.next_write()) is not None:
            events.extend(batch)
        ending = handle.ending or Ending.SHUTDOWN
        texts = [handle.text_of(event) for event in events]
        now = clock.now_ns()
        handle.mark_written(events, now, [0] * len(events), texts)
        if ending is Ending.RESET:
            handle.finish(now, "reset")
            await self._reset(scope)
            return
        status = 200
        body: dict[str, Any]
        if ending in (Ending.STOP, Ending.LENGTH):
            truth = handle.truth
            text = "".join(texts)
            body = wire.whole(text, ending.value, truth.prompt_tokens, truth.tokens_written)
        else:
            status = 500
            message = "lab fault: error-after" if ending is Ending.ERROR else "shutting down"
            body = error_payload(message, type="server_error", code=500)
        data = orjson.dumps(body)
        headers = [*_JSON_HEADERS, (b"x-request-id", self._request_id)]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        handle.finish(clock.now_ns())


async def _wait_for_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()  # at once: the notice instant is part of the ground truth
            return


def _observe(metrics: LabMetrics, events: int, now: int, arrival: int, last: int | None) -> None:
    if last is None:
        metrics.ttft.observe((now - arrival) / 1e9)
    else:
        metrics.itl.observe((now - last) / 1e9)
    for _ in range(events - 1):  # events written together are 0 s apart
        metrics.itl.observe(0.0)
