"""OpenAI-style error responses, shared by the servers (the lab, the gateway, the replay).

A refused request gets ``{"error": {"message", "type", "param", "code"}}`` with its HTTP
status, the shape the ``openai`` SDK turns into a typed exception.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from steadystream.protocol.openai import error_payload

__all__ = ["ApiError", "error_response", "is_client_id", "json_response", "read_body"]

_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def is_client_id(value: str) -> bool:
    """Whether an id a client chose (a request id, a page's stream id) may be used as given:
    1 to 128 of ``A-Z a-z 0-9 . _ : -``, safe in a header, a log line and a URL path. The
    whole value must match (``re.match``'s ``$`` would let a trailing line break in)."""
    return _CLIENT_ID.fullmatch(value) is not None


class ApiError(Exception):
    """A request a server refuses or cannot serve; becomes an OpenAI-style error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        type: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type
        self.code = code

    def payload(self) -> dict[str, Any]:
        return error_payload(self.message, type=self.type, code=self.code, param=self.param)

    def response(self, headers: dict[str, str] | None = None) -> Response:
        return error_response(
            self.status, self.message, self.param, self.type, self.code, headers=headers
        )


def error_response(
    status: int,
    message: str,
    param: str | None = None,
    type: str = "invalid_request_error",
    code: str | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> Response:
    body = orjson.dumps(error_payload(message, type=type, code=code, param=param))
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def json_response(data: object, status: int = 200) -> Response:
    """A JSON answer (orjson), as every server here writes one."""
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


async def read_body(request: Request, limit: int) -> bytes:
    """A request's body, refused with 413 as soon as it is known to pass ``limit`` bytes."""
    too_large = ApiError(
        413, f"the request body is larger than {limit} bytes", code="request_too_large"
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
