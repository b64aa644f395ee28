"""An upstream's refusal passed on to the client, before anything else was sent.

The upstream's status goes through as it is (a 400 is the client's to fix, a 429 the
client's to wait out); a connection that could not be made is a 502, one that sent no
headers in time a 504. The message says which upstream and why, with keys scrubbed. A
``Retry-After`` the upstream sent with its refusal (a 429, a 503) goes along, so the client's
SDK waits as asked.
"""

from __future__ import annotations

import orjson
from starlette.types import Send

from steadystream._exceptions import UpstreamError, UpstreamStatusError, UpstreamTimeoutError
from steadystream._types import Outcome
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.state import GatewayState
from steadystream.gateway.upstreams import ResponseTooLargeError

__all__ = ["send_refusal"]


async def send_refusal(
    send: Send, state: GatewayState, record: StreamRecord, error: UpstreamError
) -> None:
    """Answer with ``error`` as an OpenAI-style error body, and note it."""
    if isinstance(error, UpstreamStatusError):
        status, code = error.status, f"upstream_{error.status}"
    elif isinstance(error, UpstreamTimeoutError):
        status, code = 504, "upstream_timeout"
    elif isinstance(error, ResponseTooLargeError):
        status, code = 502, "upstream_response_too_large"
    else:
        status, code = 502, "upstream_unreachable"
    message = state.pool.redact(str(error))
    body = orjson.dumps(
        {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", record.request_id.encode()),
    ]
    if isinstance(error, UpstreamStatusError) and error.retry_after is not None:
        headers.append((b"retry-after", error.retry_after.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
    record.outcome = Outcome.ERROR
    record.error = message
    state.log.info("request %s: refused: %s", record.request_id, message)
    labels = record.labels
    state.metrics.errors.labels(labels["route"], labels["tenant"], code).inc()
