"""A scripted upstream of the typed-event APIs (OpenAI Responses, Anthropic Messages).

An aiohttp server in a background thread; ``with`` starts and stops it. A request's body
field ``script`` says how its stream goes (the gateway passes unknown fields on untouched):
``ok`` (every delta), ``stall`` (five deltas, then silence), ``silent`` (a 200, then
nothing), ``overloaded`` (three deltas, then the API's in-band error), ``refuse`` (a 529
before any byte; an upstream made with ``refuse=True`` answers every request so). Each
answer is the words of :data:`WORDS`, one delta each, 10 ms apart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from tests.support.threaded_app import ThreadedApp

__all__ = ["WORDS", "TypedUpstream"]

WORDS = ["Hello", " from", " a", " typed", " stream", " that", " goes", " on", "."]


def _event(kind: str, **fields: Any) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    )


class TypedUpstream(ThreadedApp):
    """Serves ``/v1/responses`` and ``/v1/messages`` as the module docstring says."""

    what = "the typed upstream"

    def __init__(self, name: str = "typed", *, refuse: bool = False) -> None:
        super().__init__()
        self.name = name
        self.refuse = refuse  # every request gets a 529, whatever its script
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's, names lowercased
        self.left_early = 0  # streams whose client (the gateway) went before the end

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        script = "refuse" if self.refuse else body.get("script", "ok")
        if script == "refuse":
            return web.json_response({"error": {"message": "busy"}}, status=529)
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "resp_w",
                    "object": "response",
                    "status": "completed",
                    "model": body["model"],
                    "output": [
                        {
                            "type": "message",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": "".join(WORDS)}],
                        }
                    ],
                    "usage": {"input_tokens": 4, "output_tokens": len(WORDS), "total_tokens": 13},
                }
            )
        seq = iter(range(10_000))
        created = {
            "id": f"resp_{self.name}",
            "object": "response",
            "created_at": 1,
            "model": body["model"],
            "status": "in_progress",
            "output": [],
        }
        head = [
            _event("response.created", sequence_number=next(seq), response=created),
            _event("response.in_progress", sequence_number=next(seq), response=created),
            _event(
                "response.output_item.added",
                sequence_number=next(seq),
                output_index=0,
                item={
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                },
            ),
            _event(
                "response.content_part.added",
                sequence_number=next(seq),
                item_id="msg_1",
                output_index=0,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            ),
        ]

        def delta(word: str) -> bytes:
            return _event(
                "response.output_text.delta",
                sequence_number=next(seq),
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta=word,
                logprobs=[],
            )

        def error() -> bytes:
            return _event(
                "error",
                sequence_number=next(seq),
                code="server_overloaded",
                message="overloaded",
                param=None,
            )

        def tail() -> list[bytes]:
            text = "".join(WORDS)
            done = dict(
                created,
                status="completed",
                usage={
                    "input_tokens": 4,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": len(WORDS),
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 4 + len(WORDS),
                },
                output=[
                    {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                ],
            )
            return [
                _event(
                    "response.output_text.done",
                    sequence_number=next(seq),
                    item_id="msg_1",
                    output_index=0,
                    content_index=0,
                    text=text,
                    logprobs=[],
                ),
                _event("response.completed", sequence_number=next(seq), response=done),
            ]

        return await self._stream(request, script, head, delta, error, tail)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append({name.lower(): value for name, value in request.headers.items()})
        script = "refuse" if self.refuse else body.get("script", "ok")
        if script == "refuse":
            return web.json_response(
                {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
                status=529,
            )
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "msg_w",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [{"type": "text", "text": "".join(WORDS)}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 4, "output_tokens": len(WORDS)},
                }
            )
        message = {
            "id": f"msg_{self.name}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 4, "output_tokens": 1},
        }
        head = [
            _event("message_start", message=message),
            _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _event("ping"),
        ]

        def delta(word: str) -> bytes:
            return _event(
                "content_block_delta", index=0, delta={"type": "text_delta", "text": word}
            )

        def error() -> bytes:
            return _event("error", error={"type": "overloaded_error", "message": "Overloaded"})

        def tail() -> list[bytes]:
            return [
                _event("content_block_stop", index=0),
                _event(
                    "message_delta",
                    delta={"stop_reason": "end_turn", "stop_sequence": None},
                    usage={"output_tokens": len(WORDS)},
                ),
                _event("message_stop"),
            ]

        return await self._stream(request, script, head, delta, error, tail)

    async def _stream(self, request, script, head, delta, error, tail):  # type: ignore[no-untyped-def]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if script == "silent":  # a 200, then nothing at all
                await asyncio.sleep(60)
            for piece in head:
                await response.write(piece)
            for i, word in enumerate(WORDS):
                if script == "stall" and i == 5:
                    await asyncio.sleep(60)
                if script == "overloaded" and i == 3:
                    await response.write(error())
                    return response
                await response.write(delta(word))
                await asyncio.sleep(0.01)
            for piece in tail():
                await response.write(piece)
        except (ConnectionResetError, asyncio.CancelledError):
            self.left_early += 1
            raise
        return response

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
