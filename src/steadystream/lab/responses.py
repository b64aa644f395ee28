"""Writing one request's answer to the client, and noticing when the client leaves.

The bytes come from the request's :class:`~steadystream.lab.wire.Wire` (its API's shape);
what is written when, and what the ground truth records, is the same for every API.

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

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from steadystream.lab.causes import Cause, Extras
from steadystream.lab.emission import PlannedEvent
from steadystream.lab.metrics import LabMetrics
from steadystream.lab.stream import Ending, StreamHandle
from steadystream.lab.wire import Part, Wire, data_of

__all__ = ["ConnectionResetter", "LabResponse"]

ConnectionResetter = Callable[[Scope], Awaitable[bool]]
"""Aborts the TCP connection a request came on (RST); False when it cannot."""

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SILENCE: Part = (None, b"")  # where a silent finish pauses


class _ConnectionAborted(Exception):
    """Raised to make a server without a resetter drop the connection mid-body."""


class LabResponse(Response):
    """The answer to one generation request, streamed or whole."""

    def __init__(
        self,
        handle: StreamHandle,
        wire: Wire,
        *,
        stream: bool,
        request_id: str,
        metrics: LabMetrics | None,
        resetter: ConnectionResetter | None,
        authorization: str | None = None,
        credential_name: str = "Authorization",
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
        # echoed only by the echo-auth fault, as ``credential_name: authorization``
        self._authorization = authorization
        self._credential_name = credential_name
        self._oversized = False
        self._sent: list[str] = []  # the text as written, for a closing that repeats it

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
        while (batch := await handle.next_write()) is not None:
            # Built in the order written: some APIs number their events.
            head = wire.opening() if last_written is None else []
            texts = [handle.text_of(event) for event in batch]
            sent = [self._sent_text(event, text) for event, text in zip(batch, texts, strict=True)]
            self._sent.extend(sent)
            contents = [wire.content(text) for text in sent]
            ending = handle.ending
            tail = self._tail(ending) if ending is not None else []
            now_part = self._now_part(tail)
            body = b"".join([*(data for _, data in head), *contents, *(d for _, d in now_part)])
            await send({"type": "http.response.body", "body": body, "more_body": True})
            now = clock.now_ns()
            for kind, data in head:
                if kind is not None:
                    handle.mark_other(kind, now, len(data), batch[0].planned_ns)
            handle.mark_written(batch, now, [len(data) for data in contents], texts)
            if metrics is not None:
                _observe(metrics, len(batch), now, arrival, last_written)
                metrics.observe_injected(event.extras for event in batch)
            last_written = now
            if ending is not None:
                await self._end(scope, send, ending, tail, now)
                return
        ending = handle.ending or Ending.SHUTDOWN
        opens = last_written is None and wire.opening_first
        head = wire.opening() if opens else []
        tail = self._tail(ending)
        if tail and head:  # an ending with no content before it still opens the stream
            tail = [*head, *tail]
        if now_part := self._now_part(tail):
            body = b"".join(data for _, data in now_part)
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await self._end(scope, send, ending, tail, clock.now_ns())

    def _sent_text(self, event: PlannedEvent, text: str) -> str:
        """The text as written: the one event the oversize fault asks for is padded."""
        faults = self._handle.faults
        after = faults.oversize_after
        if after is None or self._oversized or event.first_token + event.tokens <= after:
            return text
        self._oversized = True
        # Padding with an ASCII letter adds exactly one byte per character to the event.
        missing = faults.oversize_bytes - self._wire.size(text)
        return text + "x" * missing if missing > 0 else text

    def _tail(self, ending: Ending) -> list[Part]:
        """What follows the last content: the closing (chat: finish, usage and [DONE]); or
        an error and what follows it.

        With a silent-finish fault, an entry ``(None, b"")`` marks where the silence falls.
        """
        wire = self._wire
        if ending in (Ending.STOP, Ending.LENGTH):
            truth = self._handle.truth
            text = "".join(self._sent)
            before, after = wire.closing(
                ending.value, truth.prompt_tokens, truth.tokens_generated, text
            )
            if self._handle.faults.silent_finish_ns is not None:
                return [*before, _SILENCE, *after]
            return [*before, *after]
        if ending is Ending.ERROR:
            if self._echoes_malformed():
                return wire.broken(self._echo())
            return wire.failure(self._error_message())
        if ending is Ending.SHUTDOWN:
            return wire.failure("the lab is shutting down")
        return []

    def _echoes_malformed(self) -> bool:
        faults = self._handle.faults
        return faults.echo_auth_after is not None and faults.echo_auth_form == "malformed"

    def _error_message(self) -> str:
        if self._handle.faults.echo_auth_after is None:
            return "lab fault: error-after"
        return f"lab fault: echo-auth: rejected {self._echo()}"

    def _echo(self) -> str:
        # What a careless upstream does: put the credential it was sent into its error text.
        given, name = self._authorization, self._credential_name
        return f"{name}: {given}" if given is not None else f"no {name} header"

    @staticmethod
    def _now_part(tail: list[Part]) -> list[Part]:
        """The part of the tail written at once: all of it, or what comes before a silence."""
        return tail[: tail.index(_SILENCE)] if _SILENCE in tail else tail

    async def _end(
        self,
        scope: Scope,
        send: Send,
        ending: Ending,
        tail: list[Part],
        now: int,
    ) -> None:
        handle = self._handle
        for kind, data in self._now_part(tail):
            if kind is not None:
                handle.mark_other(kind, now, len(data))
        if ending is Ending.RESET:
            handle.finish(now, "reset")
            await self._reset(scope)
            return
        if _SILENCE in tail:
            now = await self._after_silence(send, tail[tail.index(_SILENCE) + 1 :], now)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        handle.finish(now)

    async def _after_silence(self, send: Send, rest: list[Part], since: int) -> int:
        """Say nothing for the silent-finish fault's time, then write ``rest``; returns when.

        The silence is charged (``injected-fault``) to the first event written after it, or,
        with no usage chunk, to the stream's end (``end_extra_ns`` in the ground truth).
        """
        handle = self._handle
        silence = handle.faults.silent_finish_ns or 0
        await handle.clock.sleep_until(since + silence)
        body = b"".join(data for _, data in rest)
        await send({"type": "http.response.body", "body": body, "more_body": True})
        now = handle.clock.now_ns()
        extras: Extras | None = {Cause.INJECTED_FAULT: now - since}
        for kind, data in rest:
            if kind is not None:
                handle.mark_other(kind, now, len(data), since + silence, extras)
                extras = None
        if extras is not None:
            handle.truth.end_extra_ns = {cause.value: ns for cause, ns in extras.items()}
        return now

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
        sent = [self._sent_text(event, text) for event, text in zip(events, texts, strict=True)]
        if ending is Ending.RESET:
            handle.finish(now, "reset")
            await self._reset(scope)
            return
        status = 200
        if ending in (Ending.STOP, Ending.LENGTH):
            truth = handle.truth
            text = "".join(sent)
            whole = wire.whole(text, ending.value, truth.prompt_tokens, truth.tokens_written)
            data = orjson.dumps(whole)
        elif ending is Ending.ERROR and self._echoes_malformed():
            data = data_of(wire.broken(self._echo())[0][1])
        else:
            message = self._error_message() if ending is Ending.ERROR else "shutting down"
            status, data = wire.whole_failure(message)
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
