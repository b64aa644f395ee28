"""A scripted upstream of the JSON calls the gateway passes through (embeddings, moderations,
token counts).

An aiohttp server in a background thread; ``with`` starts and stops it. It answers every
``POST /v1/...`` and keeps what it got (:attr:`JsonUpstream.seen`: the path, the headers by
lower-case name, the body) and the bytes it answered (:attr:`JsonUpstream.answers`). A
request's body field ``script`` says how it answers (the gateway passes the body on
untouched):

- ``ok`` (the default): :data:`ANSWERS`' answer for the path (a 404 for any other);
- ``echo-key``: an answer that quotes the ``Authorization`` header it got;
- ``status``: the body's ``status``, with OpenAI's error body and a ``Retry-After: 7``;
- ``big``: an answer of the body's ``size`` bytes.

An upstream made with ``refuse=STATUS`` answers every request with that status.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tests.support.threaded_app import ThreadedApp

__all__ = ["ANSWERS", "JsonUpstream"]

ANSWERS: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -1.5, 3e-05]}],
        "model": "m",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
        "vendor_extra": {"note": "naïve ✓"},
    },
    "/v1/moderations": {
        "id": "modr-1",
        "model": "m",
        "results": [
            {
                "flagged": False,
                "categories": {"hate": False},
                "category_scores": {"hate": 0.001},
            }
        ],
    },
    "/v1/messages/count_tokens": {"input_tokens": 12},
    "/v1/responses/input_tokens": {"object": "response.input_tokens", "input_tokens": 7},
}
"""What a path answers with ``script: ok``."""


class JsonUpstream(ThreadedApp):
    """Serves every ``POST /v1/...`` as the module docstring says."""

    what = "the JSON upstream"

    def __init__(self, name: str = "json", *, refuse: int | None = None) -> None:
        super().__init__()
        self.name = name
        self.refuse = refuse
        self.seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.answers: list[bytes] = []

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append((request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        if self.refuse is not None:
            error = {"error": {"message": f"{self.name} is busy"}}
            return web.Response(body=orjson.dumps(error), status=self.refuse)
        script = body.get("script", "ok")
        status = 200
        headers: dict[str, str] = {"Content-Type": "application/json"}
        if script == "echo-key":
            answer: Any = {
                "input_tokens": 1,
                "note": f"you sent {request.headers['Authorization']}",
            }
        elif script == "status":
            status = int(body["status"])
            answer = {"error": {"message": f"refused with {status}", "type": "x"}}
            headers["Retry-After"] = "7"
        elif script == "big":
            answer = {"filler": "x" * int(body["size"])}
        elif request.path in ANSWERS:
            answer = ANSWERS[request.path]
        else:
            status, answer = 404, {"error": {"message": f"no {request.path} here"}}
        data = orjson.dumps(answer)
        self.answers.append(data)
        return web.Response(body=data, status=status, headers=headers)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/{path:.*}", self._handle)
