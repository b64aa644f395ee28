"""An upstream that answers a stream request whole: its answer, relayed as the stream it
would have been.

Some servers answer ``"stream": true`` with one JSON body (``Content-Type:
application/json`` and a ``Content-Length``): engines for some models, proxies that drop
the field, mocks. Read as
a stream, that body holds no event, and the client got an error (``upstream_reset``,
"closed mid-event") in place of a whole, valid answer. The relay now reads it (at most
``limits.max_response_bytes``, within the stall timeout) and hands the stream's line the
chunks a streaming server would have sent, in one read stamped when the body came: per
choice its role, reasoning, text or refusal, tool calls and finish, then the usage, then
``[DONE]``. Everything after that is the relay's as usual (translation, pacing, resume,
records), and the timeline tells the truth: one event with every token, as late as the
whole answer.

Chat and completions upstreams only: a Responses or Messages upstream that answers whole
is refused as a broken stream (the next upstream is tried), naming why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from steadystream._exceptions import ProtocolError, UpstreamStreamError
from steadystream.protocol import encode_chunk
from steadystream.protocol.apis import Api
from steadystream.protocol.chunks import is_count
from steadystream.protocol.sse import DONE
from steadystream.stamped import ResponseHead, StampedConnection
from steadystream.stamped.connection import BodySink

__all__ = ["WholeBody", "answered_whole", "read_unstreamed"]

_JSON_TYPES = ("application/json",)
_SSE_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")


def answered_whole(head: ResponseHead) -> bool:
    """Whether a stream request's answer is one JSON body, not an event stream: JSON, of a
    length given up front. (An event stream sent with the wrong type comes in chunks, of no
    length known: it is read as the stream it is.)"""
    media = head.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES and "content-length" in head.headers


class WholeBody:
    """What the relay reads of a stamped connection, for a body already read whole: one
    read of its events, stamped when the body came."""

    __slots__ = ("_data", "_stamp")

    def __init__(self, data: bytes, stamp: int) -> None:
        self._data = data
        self._stamp = stamp

    async def stream_body(self, sink: BodySink) -> int:
        data, self._data = self._data, b""
        if data:
            sink(self._stamp, data)
        return self._stamp

    def pause_reading(self) -> None:
        """(Nothing is read any more: the body is here.)"""

    def resume_reading(self) -> None:
        """(As :meth:`pause_reading`.)"""

    def close(self) -> None:
        self._data = b""


async def read_unstreamed(
    conn: StampedConnection,
    api: Api,
    *,
    name: str,
    limit: int,
    timeout_s: float,
    now_ns: Callable[[], int],
    usage: bool,
) -> WholeBody:
    """Read ``conn``'s whole JSON answer and turn it into ``api``'s stream (its usage last
    when ``usage``: the request asked for it); closes ``conn``.

    Raises :class:`UpstreamStreamError` (the relay's broken stream: the next upstream is
    tried) for an answer that is late, larger than ``limit``, not a completion, or from an
    upstream API whose stream is not made here. ``now_ns`` is the relay's clock.
    """
    where = f"upstream {name!r} answered a stream request whole (application/json)"
    try:
        if api not in ("chat", "completions"):
            raise UpstreamStreamError(f"{where}, which is relayed for chat and completions only")
        try:
            async with asyncio.timeout(timeout_s):
                body = await conn.read_body(limit + 1)
        except TimeoutError:
            raise UpstreamStreamError(f"{where} and its body was late") from None
        except ProtocolError as exc:
            raise UpstreamStreamError(f"{where} and its body broke: {exc}") from exc
        stamp = now_ns()
    finally:
        conn.close()
    if len(body) > limit:
        raise UpstreamStreamError(f"{where} larger than limits.max_response_bytes ({limit})")
    if body.lstrip().startswith(_SSE_STARTS):
        return WholeBody(body, stamp)  # (events after all, under the wrong type: as they are)
    try:
        return WholeBody(as_stream(api, body, usage=usage), stamp)
    except ProtocolError as exc:
        raise UpstreamStreamError(f"{where}: {exc}") from exc


def as_stream(api: Api, body: bytes, *, usage: bool = True) -> bytes:
    """The chat (or completions) event stream of a whole answer, ``[DONE]`` last, with a
    usage chunk before it when ``usage`` (what ``stream_options.include_usage`` asks a
    server for); raises :class:`ProtocolError` when ``body`` is no completion (an error
    object sent with a 200, say: its message is said)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"the answer is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError("the answer is not a completion (not an object)")
    choices = data.get("choices")
    if not isinstance(choices, list):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            raise ProtocolError(f"the answer is an error: {error['message'][:500]}")
        raise ProtocolError("the answer is not a completion (no choices)")
    chat = api == "chat"
    ident, created, model = data.get("id"), data.get("created"), data.get("model")
    envelope = {
        "id": ident if isinstance(ident, str) and ident else "unstreamed",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created if is_count(created) else int(time.time()),
        "model": model if isinstance(model, str) else "",
    }
    out: list[bytes] = []
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise ProtocolError(f"the answer's choice {position} is not an object")
        index = choice.get("index")
        index = index if is_count(index) else position
        finish = choice.get("finish_reason")
        finish = finish if isinstance(finish, str) else "stop"
        if chat:
            deltas = _chat_deltas(choice, position)
        else:
            text = choice.get("text")
            deltas = [{"text": text}] if isinstance(text, str) and text else []
        for delta in deltas:
            out.append(_event(envelope, index, delta, None, chat))
        out.append(_event(envelope, index, {} if chat else {"text": ""}, finish, chat))
    counts = data.get("usage")
    if usage and isinstance(counts, dict):
        out.append(encode_chunk({**envelope, "choices": [], "usage": counts}))
    out.append(DONE)
    return b"".join(out)


def _chat_deltas(choice: dict[str, Any], position: int) -> list[dict[str, Any]]:
    """A chat choice's message as the deltas a stream sends it in, in order."""
    message = choice.get("message")
    if message is None:
        message = {}
    if not isinstance(message, dict):
        raise ProtocolError(f"the answer's choice {position} has a message that is no object")
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if isinstance(reasoning, str) and reasoning:
        deltas.append({"reasoning_content": reasoning})
    for field in ("content", "refusal"):
        value = message.get(field)
        if isinstance(value, str) and value:
            deltas.append({field: value})
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for number, call in enumerate(calls):
            if not isinstance(call, dict):
                raise ProtocolError(f"the answer's choice {position} has a tool call no object")
            deltas.append({"tool_calls": [{**call, "index": number}]})
    return deltas


def _event(
    envelope: dict[str, Any], index: int, delta: dict[str, Any], finish: str | None, chat: bool
) -> bytes:
    choice: dict[str, Any] = {"index": index}
    if chat:
        choice["delta"] = delta
    else:
        choice.update(delta)
    choice["logprobs"] = None
    choice["finish_reason"] = finish
    return encode_chunk({**envelope, "choices": [choice]})
