"""An upstream's refusal passed on to the client, before anything else was sent.

The upstream's error status goes through as it is (a 400 is the client's to fix, a 429
the client's to wait out; any status that is no error, a 502); a connection that could not
be made is a 502, one that sent no headers in time a 504. The message says which upstream
and why, with keys scrubbed, in the error shape the client's API reads (``shape``:
Anthropic's on the Messages API, OpenAI's elsewhere). A ``Retry-After`` the upstream sent
with its refusal (a 429, a 503) goes along, so the client's SDK waits as asked.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from starlette.types import Send

from steadystream._api_errors import ApiError, ErrorShape
from steadystream._exceptions import (
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from steadystream._types import Outcome
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.state import GatewayState
from steadystream.gateway.upstreams import ResponseTooLargeError

__all__ = ["refusal_headers", "send_refusal", "upstream_refusal"]


def upstream_refusal(error: UpstreamError, redact: Callable[[str], str]) -> ApiError:
    """The error the client gets for ``error``: its status and code, the message scrubbed."""
    if isinstance(error, UpstreamStatusError):
        # An error status goes through; any other (a 304, a 2xx that is no answer, a 1xx, a
        # number HTTP has no status line for) is no error a client could read: a 502.
        status = error.status if 400 <= error.status <= 599 else 502
        code = _status_code(error.status)
    elif isinstance(error, UpstreamTimeoutError):
        status, code = 504, "upstream_timeout"
    elif isinstance(error, ResponseTooLargeError):
        status, code = 502, "upstream_response_too_large"
    elif isinstance(error, UpstreamStreamError):
        # Reached, but what it sent was no answer (a reset, bytes that are no HTTP, a whole
        # body that cannot be streamed): not "unreachable", which sends people to the network.
        status, code = 502, "upstream_bad_response"
    else:
        status, code = 502, "upstream_unreachable"
    return ApiError(status, redact(str(error)), type="upstream_error", code=code)


# The statuses HTTP names: each keeps its own code (``upstream_429``). Any other number an
# upstream sends (100-999 parse) is named by its class (``upstream_7xx``): the code is a
# label of ``errors_total``, and one upstream must not make 900 of them.
_NAMED = frozenset(int(status) for status in HTTPStatus)


def _status_code(status: int) -> str:
    return f"upstream_{status}" if status in _NAMED else f"upstream_{status // 100}xx"


def refusal_headers(error: UpstreamError) -> dict[str, str]:
    """The upstream's headers that go along with its refusal: a valid ``Retry-After``."""
    if isinstance(error, UpstreamStatusError) and error.retry_after is not None:
        return {"retry-after": error.retry_after}
    return {}


async def send_refusal(
    send: Send,
    state: GatewayState,
    record: StreamRecord,
    error: UpstreamError,
    shape: ErrorShape = "openai",
) -> None:
    """Answer with ``error`` as an error body in ``shape``, and note it."""
    refused = upstream_refusal(error, state.pool.redact)
    body = refused.body(shape)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", record.request_id.encode()),
        *((name.encode(), value.encode()) for name, value in refusal_headers(error).items()),
    ]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
    record.outcome = Outcome.ERROR
    record.error = refused.message
    state.log.info("request %s: refused: %s", record.request_id, refused.message)
    labels = record.labels
    state.metrics.errors.labels(labels["route"], labels["tenant"], refused.code).inc()
