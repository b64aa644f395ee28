"""Non-streaming requests: forwarded whole, with the same failover before any byte is sent.

Nothing reaches the client before the upstream's answer is complete, so every failure can
still try the next upstream (connect errors, retryable statuses, a broken body, the
upstream's request timeout), and the last refusal is passed on with its status and message.
Failovers are recorded and counted as the streaming relay's are (:class:`Relay`). A client
that leaves closes the upstream request too.

The answer is held whole (a JSON document cannot be relayed in parts and still be failed
over), so it is bounded: an answer larger than ``limits.max_response_bytes`` is refused with
a 502 naming the limit, as soon as its size is known, and is not retried elsewhere (another
upstream would give as much). It is parsed once, for the timeline's text and usage.

Only an answer can be passed on (:func:`check_answer`): a 1xx the HTTP client hands back (a
``101 Switching Protocols`` with nothing after it) is refused with a 502, as the streams'
path refuses it; and an answer in a content coding (``gzip``: the gateway asks for none)
counts as a broken body, since it would reach the client labelled as plain JSON, its keys
unscrubbed.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson
from starlette.types import Scope, Send

from steadystream._exceptions import (
    ProtocolError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
)
from steadystream._types import EventKind, Outcome
from steadystream.gateway.attempt import cause_of
from steadystream.gateway.base import Relay
from steadystream.gateway.events import Failure, Piece
from steadystream.gateway.failover import Action
from steadystream.gateway.translation import upstream_api, whole_answer
from steadystream.gateway.upstreams import build_body, media_type, read_whole
from steadystream.protocol.apis import API_PATHS
from steadystream.protocol.chunks import is_count
from steadystream.protocol.messages import messages_usage
from steadystream.protocol.responses import responses_usage

__all__ = ["WholeRelay", "check_answer"]


class WholeRelay(Relay):
    """The ASGI response of one non-streaming request."""

    _answered = False

    def answered(self) -> bool:
        return self._answered

    async def _serve(self, scope: Scope, send: Send) -> None:
        state, clock = self.state, self.clock
        candidates = self.candidates[: state.config.failover.max_attempts]
        last: UpstreamError | None = None
        note: dict[str, Any] | None = None
        route = self.request.route
        for index, upstream in enumerate(candidates):
            info = self.begin_attempt(upstream, Action.RETRY)
            api = upstream_api(upstream, route) or route  # (the app took only those that can)
            if api != route:
                info["api"] = api  # translated: the API the upstream was called in
            sent = clock.now_ns()
            response = None
            deadline = sent + upstream.timeouts.request
            try:
                response = await state.pool.post(
                    upstream,
                    API_PATHS[api],
                    build_body(self.request, upstream),
                    request_id=info["request_id"],
                    client_headers=self.client_headers,
                    timeout_s=upstream.timeouts.request / 1e9,
                )
                arrived = clock.now_ns()
                check_answer(response, upstream.name)
                left_s = max(0.0, (deadline - clock.now_ns()) / 1e9)
                body = await read_whole(
                    response, upstream.name, left_s, limit=state.config.limits.max_response_bytes
                )
                content_type = media_type(response)
                status = response.status
                if api != route:
                    body = self._translated(body, upstream.name)
                    content_type = "application/json"
            except UpstreamError as exc:
                last = exc
                if note is not None:
                    note["result"] = "failed"
                message = state.pool.redact(str(exc))
                info["error"] = message
                cause = cause_of(exc)
                info["failure"] = cause.value
                following = candidates[index + 1] if index + 1 < len(candidates) else None
                if following is None or not self.retryable(exc):
                    break
                note = self.note_failover(upstream, Failure(cause, message), "retry", following)
                continue
            finally:
                if response is not None:
                    response.close()
            state.model_labels.served(self.request.model)
            await self._answer(send, status, body, content_type, arrived)
            return
        assert last is not None
        self._answered = True
        try:
            await self.refuse(send, last)
        finally:
            last = None  # its traceback holds this frame: no cycle through the frame's locals

    def _translated(self, body: bytes, upstream: str) -> bytes:
        """A chat completion as the client's API answers (gateway/translation); one that is
        not a chat completion is the upstream's failure, as a broken body is."""
        request = self.request
        try:
            return whole_answer(
                request.route,
                body,
                self.record.request_id,
                model=request.model,
                created=int(time.time()),
                request=request.body,
            )
        except ProtocolError as exc:
            raise UpstreamStreamError(f"upstream {upstream!r} answered in chat: {exc}") from exc

    async def _answer(
        self, send: Send, status: int, body: bytes, content_type: str, arrived: int
    ) -> None:
        record = self.record
        scrub = self.state.pool.byte_scrubber()
        if scrub is not None:  # an answer that quotes an upstream's key does not pass it on
            body = scrub(body)
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", record.request_id.encode()),
        ]
        glass = self.state.glass_tokens
        if glass is not None and status < 300:  # for the page's glass report on this answer
            headers.append(glass.header(record.request_id, record.labels["tenant"]))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        self.committed = True
        self._answered = True
        await send({"type": "http.response.body", "body": body, "more_body": False})
        sent = self.clock.now_ns()
        text, usage = _answer_text(body)
        for log, t in ((record.upstream, arrived), (record.downstream, sent)):
            offset = record.offset(t)
            log.header_ns = log.first_byte_ns = offset
            if text:
                log.add(offset, Piece(EventKind.CONTENT, text, b"", len(body)))
        record.usage = usage
        if record.failovers:  # the last retry is the one that answered
            record.failovers[-1]["result"] = "completed"
        record.outcome = Outcome.COMPLETE if len(record.attempts) == 1 else Outcome.FAILED_OVER


def check_answer(response: aiohttp.ClientResponse, name: str) -> None:
    """Refuse a response that is no answer to pass on (the module docstring): a status below
    200 (:class:`UpstreamStatusError`, a 502) or a content coding other than ``identity``
    (:class:`UpstreamStreamError`, a broken body: the next upstream may answer plainly)."""
    if response.status < 200:
        raise UpstreamStatusError(
            response.status, f"upstream {name!r} answered {response.status}, which is no answer"
        )
    coding = response.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise UpstreamStreamError(
            f"upstream {name!r} answered in a content coding it was not asked for ({coding[:40]!r})"
        )


def _answer_text(body: bytes) -> tuple[str, dict[str, int] | None]:
    """The answer's text and usage, for the timeline (empty when the body is not a completion)."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", None
    if not isinstance(data, dict):
        return "", None
    usage = data.get("usage")
    if data.get("object") == "response":  # the Responses API
        return _typed_text(data.get("output"), "output_text"), responses_usage(usage)
    if data.get("type") == "message":  # the Messages API
        return _typed_text([data], "text"), messages_usage(usage)
    # Counts a timeline can hold, as a stream's usage chunk gives them (a bool, a negative
    # number or a 2**64 is no count: its record could not be written).
    counts = {k: v for k, v in usage.items() if is_count(v)} if isinstance(usage, dict) else None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", counts
    choice = choices[0]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return (text if isinstance(text, str) else ""), counts


def _typed_text(items: Any, part: str) -> str:
    """The visible text of a Responses output (its ``output_text`` parts) or a Message (its
    ``text`` blocks): the ``content`` lists of ``items``."""
    if not isinstance(items, list):
        return ""
    texts = []
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == part:
                text = block.get("text")
                texts.append(text if isinstance(text, str) else "")
    return "".join(texts)
