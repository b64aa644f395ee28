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
records), and the timeline tells the truth: one read with every token (a long text in
pieces, as a streaming server sends it), as late as the whole answer. What the answer holds
is checked before a byte goes out, so a body that cannot be streamed (two choices of one
index, a content that is no text, a stream past its bound) is a 502 naming why, never an
in-band error after the 200.

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
        except (ProtocolError, UpstreamStreamError) as exc:  # (cut short: closed early)
            raise UpstreamStreamError(f"{where} and its body broke: {exc}") from exc
        stamp = now_ns()
    finally:
        conn.close()
    if len(body) > limit:
        raise UpstreamStreamError(f"{where} larger than limits.max_response_bytes ({limit})")
    if body.lstrip().startswith(_SSE_STARTS):
        return WholeBody(body, stamp)  # (events after all, under the wrong type: as they are)
    try:
        return WholeBody(as_stream(api, body, usage=usage, limit=limit), stamp)
    except ProtocolError as exc:
        raise UpstreamStreamError(f"{where}: {exc}") from exc


def as_stream(api: Api, body: bytes, *, usage: bool = True, limit: int | None = None) -> bytes:
    """The chat (or completions) event stream of a whole answer, ``[DONE]`` last, with a
    usage chunk before it when ``usage`` (what ``stream_options.include_usage`` asks a
    server for); raises :class:`ProtocolError` when ``body`` is no completion (an error
    object sent with a 200, say: its message is said), or when its stream would be larger
    than twice ``limit`` (``limits.max_response_bytes``: every event repeats the answer's
    envelope, so a body of many small choices makes a stream many times its size).

    A text longer than :data:`_PIECE` characters goes out in pieces of that length, as a
    streaming server sends it: one event of it all would be larger than
    ``limits.max_event_bytes`` for an answer well within ``limits.max_response_bytes``."""
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
    if not choices:
        raise ProtocolError("the answer has no choice (choices is empty)")
    chat = api == "chat"
    created = data.get("created")
    envelope = {
        "id": _name(data.get("id")) or "unstreamed",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created if is_count(created) else int(time.time()),
        "model": _name(data.get("model")),
    }
    most = None if limit is None else 2 * limit
    out: list[bytes] = []
    size = 0

    def add(event: bytes) -> None:
        nonlocal size
        size += len(event)
        if most is not None and size > most:
            raise ProtocolError(
                f"the answer's stream would be larger than twice limits.max_response_bytes"
                f" ({limit})"
            )
        out.append(event)

    positions: dict[int, int] = {}  # index -> the position of the choice that has it
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise ProtocolError(f"the answer's choice {position} is not an object")
        index = choice.get("index")
        index = index if is_count(index) else position
        if index in positions:  # (its text would be streamed into the other's)
            raise ProtocolError(
                f"the answer's choices {positions[index]} and {position} have the same"
                f" index ({index})"
            )
        positions[index] = position
        finish = _name(choice.get("finish_reason")) or "stop"
        if chat:
            deltas = _chat_deltas(choice, position)
        else:
            text = _text(choice.get("text"), f"the answer's choice {position} has a text")
            deltas = [{"text": piece} for piece in _pieces(text)]
        for delta in deltas:
            add(_event(envelope, index, delta, None, chat))
        add(_event(envelope, index, {} if chat else {"text": ""}, finish, chat))
    counts = data.get("usage")
    if usage and isinstance(counts, dict):
        add(encode_chunk({**envelope, "choices": [], "usage": _counts(counts)}))
    out.append(DONE)
    return b"".join(out)


_PIECE = 4096
"""The most characters of text in one event of a whole answer's stream: at most 24 KiB of
JSON (six bytes a character, escaped), far below ``limits.max_event_bytes``."""

_MOST_NAME = 1024
"""The longest id, model, finish reason or tool name that is kept: one of megabytes would
be repeated in every event (and past ``limits.max_event_bytes``, fail the stream)."""


def _name(value: Any) -> str:
    """``value`` when it is a string of at most :data:`_MOST_NAME` characters, else ``""``."""
    return value if isinstance(value, str) and len(value) <= _MOST_NAME else ""


def _pieces(text: str) -> list[str]:
    return [text[start : start + _PIECE] for start in range(0, len(text), _PIECE)]


def _kind(value: Any) -> str:
    """What a JSON value is, in words (never the value: it may hold anything)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def _text(value: Any, where: str) -> str:
    """A message's text: a string, content parts (their texts, joined) or null."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        texts: list[str] = []
        for number, part in enumerate(value):
            if not isinstance(part, dict):
                raise ProtocolError(f"{where} whose part {number} is not an object")
            text = part.get("text")
            if isinstance(text, str):  # (a part of another kind has no text to stream)
                texts.append(text)
        return "".join(texts)
    raise ProtocolError(f"{where} that is {_kind(value)}, expected a string or parts")


def _counts(usage: dict[str, Any]) -> dict[str, Any]:
    """A usage object's counts, and its details' (objects of counts); anything else an
    upstream put there (text, nesting) is left out."""
    kept: dict[str, Any] = {}
    for key, value in usage.items():
        if not _name(key):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            kept[key] = value
        elif isinstance(value, dict):
            kept[key] = {
                k: v
                for k, v in value.items()
                if _name(k) and isinstance(v, int | float) and not isinstance(v, bool)
            }
    return kept


def _chat_deltas(choice: dict[str, Any], position: int) -> list[dict[str, Any]]:
    """A chat choice's message as the deltas a stream sends it in, in order."""
    where = f"the answer's choice {position}"
    message = choice.get("message")
    if message is None:
        message = {}
    if not isinstance(message, dict):
        raise ProtocolError(f"{where} has a message that is no object")
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    # (vLLM sends ``reasoning`` and a null ``reasoning_content``; others one of them)
    for field in ("reasoning_content", "reasoning"):
        reasoning = message.get(field)
        if isinstance(reasoning, str) and reasoning:
            deltas += [{"reasoning_content": piece} for piece in _pieces(reasoning)]
            break
    for field in ("content", "refusal"):
        text = _text(message.get(field), f"{where} has a {field}")
        deltas += [{field: piece} for piece in _pieces(text)]
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise ProtocolError(f"{where} has tool_calls that are {_kind(calls)}, expected a list")
    for number, call in enumerate(calls or ()):
        deltas += _call_deltas(call, number, f"{where}'s tool call {number}")
    return deltas


def _call_deltas(call: Any, number: int, where: str) -> list[dict[str, Any]]:
    """One tool call as a stream sends it: its id, type and name with the first piece of
    its arguments, then the rest of them. Arguments sent as JSON (an object, not its text)
    are sent as their text."""
    if not isinstance(call, dict):
        raise ProtocolError(f"{where} is not an object")
    function = call.get("function")
    function = {} if function is None else function
    if not isinstance(function, dict):
        raise ProtocolError(f"{where} has a function that is {_kind(function)}, expected an object")
    arguments = function.get("arguments")
    if isinstance(arguments, dict | list):
        try:
            arguments = orjson.dumps(arguments).decode()
        except orjson.JSONEncodeError:
            raise ProtocolError(f"{where} has arguments nested too deep") from None
    arguments = _text(arguments, f"{where} has arguments") if arguments is not None else ""
    head: dict[str, Any] = {"index": number}
    for field, value in (("id", call.get("id")), ("type", call.get("type"))):
        if value is not None and not _name(value):
            raise ProtocolError(f"{where} has an {field} that is no short string")
        if value is not None:
            head[field] = value
    head.setdefault("type", "function")
    named: dict[str, Any] = {}
    name = function.get("name")
    if name is not None:
        if not _name(name):
            raise ProtocolError(f"{where} has a name that is no short string")
        named["name"] = name
    pieces = _pieces(arguments) or [""]
    deltas = [{"tool_calls": [{**head, "function": {**named, "arguments": pieces[0]}}]}]
    deltas += [
        {"tool_calls": [{"index": number, "function": {"arguments": piece}}]}
        for piece in pieces[1:]
    ]
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
