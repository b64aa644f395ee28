"""Error responses in each API's own shape, shared by the servers (lab, gateway, replay).

A refused request gets its HTTP status and a body in the shape its client's SDK reads
(:data:`ErrorShape`), which the SDK turns into a typed exception by the status:

- ``openai`` (Chat Completions, Completions, Responses, everything OpenAI-compatible):
  ``{"error": {"message", "type", "param", "code"}}``;
- ``anthropic`` (the Messages API): ``{"type": "error", "error": {"type", "message"}}``, the
  type the one Anthropic gives the status (:func:`anthropic_error_type`). Its errors have no
  ``param``, so the field a 400 names starts the message (``max_tokens: required, ...``).

:meth:`ApiError.body` is the one place an error becomes a body, in either shape.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeAlias

import orjson
from starlette.requests import Request
from starlette.responses import Response

from steadystream.protocol.openai import error_payload

__all__ = [
    "ApiError",
    "ErrorShape",
    "anthropic_error_type",
    "error_response",
    "is_client_id",
    "json_response",
    "read_body",
]

ErrorShape: TypeAlias = Literal["openai", "anthropic"]
"""The error body a client reads: OpenAI's, or Anthropic's (the Messages API)."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",  # Anthropic's own status for it
}
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def is_client_id(value: str) -> bool:
    """Whether an id a client chose (a request id, a page's stream id) may be used as given:
    1 to 128 of ``A-Z a-z 0-9 . _ : -``, safe in a header, a log line and a URL path. The
    whole value must match (``re.match``'s ``$`` would let a trailing line break in)."""
    return _CLIENT_ID.fullmatch(value) is not None


def anthropic_error_type(status: int) -> str:
    """The Anthropic error type of an HTTP status: its own for the statuses Anthropic uses,
    else ``invalid_request_error`` for a 4xx and ``api_error`` for a 5xx."""
    known = _ANTHROPIC_TYPES.get(status)
    if known is not None:
        return known
    return "api_error" if status >= 500 else "invalid_request_error"


class ApiError(Exception):
    """A request a server refuses or cannot serve; becomes an error response in the shape
    its client reads (:meth:`response`)."""

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

    def payload(self, shape: ErrorShape = "openai") -> dict[str, Any]:
        """The error body, as JSON data, in ``shape``."""
        if shape == "openai":
            return error_payload(self.message, type=self.type, code=self.code, param=self.param)
        message = self.message
        if self.param is not None and not message.startswith(f"{self.param}:"):
            message = f"{self.param}: {message}"
        return {
            "type": "error",
            "error": {"type": anthropic_error_type(self.status), "message": message},
        }

    def body(self, shape: ErrorShape = "openai") -> bytes:
        """The error body, encoded, in ``shape``."""
        return orjson.dumps(self.payload(shape))

    def response(
        self, headers: dict[str, str] | None = None, shape: ErrorShape = "openai"
    ) -> Response:
        return Response(
            self.body(shape),
            status_code=self.status,
            media_type="application/json",
            headers=headers,
        )


def error_response(
    status: int,
    message: str,
    param: str | None = None,
    type: str = "invalid_request_error",
    code: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    shape: ErrorShape = "openai",
) -> Response:
    error = ApiError(status, message, param=param, type=type, code=code)
    return error.response(headers, shape)


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
