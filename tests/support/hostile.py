"""A hand-written upstream that misbehaves on request, for the hardening tests.

What it does is chosen per request by the body field ``hostile`` (the gateway passes unknown
fields on untouched); ``size`` sizes the big ones. Every text it sends back echoes the
``Authorization`` header it got, the worst a provider can do with a key; ``seen_keys`` lists
the headers it got.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from tests.support.threaded_app import ThreadedApp

__all__ = ["HostileUpstream"]


def _chunk(
    content: str | None = None, *, finish: str | None = None, role: bool = False, index: int = 0
) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    obj = {
        "id": "chatcmpl-h",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "lab",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class HostileUpstream(ThreadedApp):
    """An aiohttp server in a background thread; ``with`` starts and stops it."""

    what = "the hostile upstream"

    def __init__(self, *, default: str = "") -> None:
        super().__init__()
        self.default = default  # the mode of a request that names none
        self.seen_keys: list[str] = []
        self.closed_early = 0  # streams whose client (the gateway) went before the end

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen_keys.append(request.headers.get("Authorization", ""))
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        mode = body.get("hostile", self.default)
        size = int(body.get("size", 0))
        echo = f"you sent key {key}"
        if mode == "auth":  # what OpenAI answers a wrong key, the key quoted
            message = f"Incorrect API key provided: {key}"
            return web.json_response({"error": {"message": message}}, status=401)
        if mode == "status":
            return web.json_response(
                {"error": {"message": echo}}, status=500, headers={"X-Echo": key}
            )
        if mode == "rate-limit":
            return web.json_response(
                {"error": {"message": f"slow down ({echo})"}},
                status=429,
                headers={"Retry-After": "7", "X-Echo": key},
            )
        if mode == "header":
            answer = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
            return web.Response(
                body=orjson.dumps(answer),
                headers={"Content-Type": f"application/json; {key}", "X-Echo": key},
            )
        if mode == "content-echo-whole":
            answer = {"choices": [{"message": {"role": "assistant", "content": echo}}]}
            return web.json_response(answer)
        if mode == "big-body":
            filler = "x" * size
            answer = {"choices": [{"message": {"role": "assistant", "content": filler}}]}
            return web.Response(body=orjson.dumps(answer), content_type="application/json")
        if mode == "status-text":  # an error body that is not JSON
            return web.Response(text=f"upstream broke: {echo}", status=500)
        if mode == "retry-after":  # a hostile Retry-After value, chosen by the test
            return web.json_response(
                {"error": {"message": "slow down"}},
                status=429,
                headers={"Retry-After": str(body.get("retry_after", ""))},
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if mode == "adv-echo-prompt":  # the model quotes the user's message back
                said = str(body["messages"][-1]["content"])
                await response.write(_chunk(role=True) + _chunk(f"you said: {said}"))
                await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
                return response
            if mode.startswith("adv-"):
                await self._adversary(response, mode, key, echo)
                return response
            await response.write(_chunk(role=True))
            for word in ("one ", "two ", "three "):
                await response.write(_chunk(word))
            if mode == "content-echo":
                await response.write(_chunk(echo) + _chunk(finish="stop") + b"data: [DONE]\n\n")
            elif mode == "error-event":
                error = orjson.dumps({"error": {"message": echo, "type": "server_error"}})
                await response.write(b"data: " + error + b"\n\n")
            elif mode == "bad-chunk":
                await response.write(b"data: {not json, " + echo.encode() + b"\n\n")
            elif mode == "finish-close":
                await response.write(_chunk(finish="stop"))
                return response  # the end of the body, but no [DONE]
            elif mode == "finish-silence":
                await response.write(_chunk(finish="stop"))
                await asyncio.sleep(60)  # neither [DONE] nor the close
            elif mode == "big-event":
                # One event of ``size`` bytes in 64 KiB writes, then the rest of a good stream.
                await response.write(b'data: {"pad": "')
                for _ in range(size // 65_536):
                    await response.write(b"x" * 65_536)
                await response.write(b'"}\n\n')
                await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
            elif mode == "endless-line":
                await response.write(b"data: ")
                for _ in range(size // 65_536):
                    await response.write(b"y" * 65_536)
                await asyncio.sleep(60)
            else:
                await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.closed_early += 1
            raise
        return response

    async def _models(self, request: web.Request) -> web.Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if key.startswith("models-data-"):  # a list that is no list: null, a number, a dict
            data = orjson.loads(key.removeprefix("models-data-"))
            return web.json_response({"object": "list", "data": data})
        listed = [{"id": "lab"}, {"id": f"model-of-{key}"}, {"id": 5}, "junk"]
        return web.json_response({"object": "list", "data": listed})

    async def _adversary(
        self, response: web.StreamResponse, mode: str, key: str, echo: str
    ) -> None:
        """The adversary's modes (tests/gateway/test_adversary.py)."""

        if mode == "adv-role-close":  # the role chunk, then the end: no token, no [DONE]
            await response.write(_chunk(role=True))
        elif mode == "adv-escaped-echo":  # the key JSON-escaped: a client's parser restores it
            escaped = "".join(f"\\u{ord(c):04x}" for c in key)
            await response.write(_chunk(role=True))
            text = b'"you sent key ' + escaped.encode() + b'"'
            await response.write(_chunk("PLACEHOLDER").replace(b'"PLACEHOLDER"', text))
            await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
        elif mode == "adv-finish-keepalive":  # "stop", then pings forever
            await response.write(_chunk(role=True) + _chunk("one ") + _chunk(finish="stop"))
            for _ in range(600):
                await response.write(b": ping\n\n")
                await asyncio.sleep(0.05)
        elif mode == "adv-finish-garbage":  # "stop", then a chunk that is not JSON
            await response.write(_chunk(role=True) + _chunk("one ") + _chunk(finish="stop"))
            await response.write(b"data: {garbage " + echo.encode() + b"\n\n")
            await asyncio.sleep(60)
        elif mode == "adv-n2-double-finish":  # choice 0 says "stop" twice; choice 1 goes on
            await response.write(_chunk(role=True) + _chunk(role=True, index=1))
            await response.write(_chunk("a ", index=0) + _chunk(finish="stop", index=0))
            await response.write(_chunk(finish="stop", index=0))
            for word in range(8):
                await response.write(_chunk(f"w{word} ", index=1))
                await asyncio.sleep(0.06)  # 0.48 s in all: past the tests' finish_timeout
            await response.write(_chunk(finish="stop", index=1) + b"data: [DONE]\n\n")
        elif mode == "adv-fields-echo":  # the key in the id, model, finish reason and usage
            obj: dict[str, Any] = {
                "id": echo,
                "object": "chat.completion.chunk",
                "created": 1,
                "model": echo,
                "system_fingerprint": echo,
                "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
            }
            await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")
            obj["choices"] = [{"index": 0, "delta": {}, "finish_reason": echo}]
            await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")
            obj["choices"] = []
            obj["usage"] = {"completion_tokens": 1, "prompt_tokens": 1, "note": echo}
            await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")
            await response.write(b": " + echo.encode() + b"\n\nevent: x" + key.encode() + b"\n")
            await response.write(b"data: " + echo.encode() + b"\n\ndata: [DONE]\n\n")
        elif mode == "adv-split-reads":  # the key cut across two reads of one event
            await response.write(_chunk(role=True))
            event = _chunk(echo)
            cut = event.index(key.encode()) + len(key) // 2
            await response.write(event[:cut])
            await asyncio.sleep(0.05)
            await response.write(event[cut:])
            await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
        elif mode == "adv-key-prefix":  # most of the key, then an escaped slash
            await response.write(_chunk(role=True))
            text = b'"you sent key ' + key[:-6].encode() + b'\\/ and more"'
            await response.write(_chunk("PLACEHOLDER").replace(b'"PLACEHOLDER"', text))
            await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
        elif mode == "adv-bad-chunk-cut":  # a bad chunk whose 80-character preview cuts the key
            await response.write(_chunk(role=True) + _chunk("one "))
            await response.write(b"data: {not json, " + b"p" * 50 + key.encode() + b"\n\n")
        elif mode == "adv-finish-reset":  # "stop", then the connection is reset
            await response.write(_chunk(role=True) + _chunk("one ") + _chunk(finish="stop"))
            await asyncio.sleep(0.05)
            transport = response._req.transport if response._req is not None else None
            if transport is not None:
                transport.abort()
        elif mode == "adv-two-finishes-one-chunk":  # n=2: both finish reasons in one chunk
            obj = orjson.loads(_chunk("a ")[6:])
            obj["choices"] = [
                {"index": 0, "delta": {"content": "a "}, "finish_reason": None},
                {"index": 1, "delta": {"content": "b "}, "finish_reason": None},
            ]
            await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")
            for choice in obj["choices"]:
                choice["delta"] = {}
                choice["finish_reason"] = "stop"
            await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")
            await asyncio.sleep(60)  # then silence: the answer was whole
        elif mode == "adv-many-small":  # thousands of events in one write
            await response.write(_chunk(role=True) + _chunk("x") * 10_000)
            await response.write(_chunk(finish="stop") + b"data: [DONE]\n\n")
        elif mode == "adv-cr-only":  # CR line endings, which SSE allows
            events = [_chunk(role=True), _chunk("one "), _chunk("two "), _chunk(finish="stop")]
            data = b"".join(events) + b"data: [DONE]\n\n"
            await response.write(data.replace(b"\n", b"\r"))

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/v1/models", self._models)
