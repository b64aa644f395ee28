"""The chat dialect: OpenAI Chat Completions and Completions streams (protocol/dialect.py).

``data:`` events carry chunk JSON (:mod:`steadystream.protocol.chunks` says what each one
means); ``data: [DONE]`` ends the answer; comments and events of other names are keepalives;
``event: error`` and error-shaped chunks are the upstream's in-band errors. The common chunk
(one choice whose delta holds only new content, and at most its role) is read here without
the general classification: it is nearly every event of every stream.

Written once, here, in Python; where the package was built with a compiler it also runs
compiled by Cython (``_chat_c``, its types in ``_chat_c.pxd``; :mod:`steadystream._build`).
"""

from __future__ import annotations

from typing import Any

import orjson

from steadystream._types import EventKind
from steadystream.protocol.chunks import Chunk, classify_chunk, parse_chunk
from steadystream.protocol.dialect import Decoded
from steadystream.protocol.sse_items import SseComment, SseItem

__all__ = ["ChatDialect"]

_ENVELOPE_KEYS = ("id", "created", "model")
_CONTENT = EventKind.CONTENT  # (a member read per event costs a lookup through its class)
_KEEPALIVE = Decoded(EventKind.KEEPALIVE)
_END = Decoded(None)
_new = tuple.__new__  # (a NamedTuple's own __new__ is a Python call, on every event)


class ChatDialect:
    """Decodes the events of one chat or completions stream (see the module docstring)."""

    __slots__ = ("_envelope",)

    def __init__(self) -> None:
        self._envelope: dict[str, Any] | None = None

    @property
    def envelope(self) -> dict[str, Any] | None:
        """The first chunk's ``id``, ``created`` and ``model``: a fallback's chunks get them."""
        return self._envelope

    def decode(self, item: SseItem) -> Decoded:
        if isinstance(item, SseComment):
            return _KEEPALIVE
        event = item.event
        payload: str = item.data
        if event == "message":
            if not payload:
                return _KEEPALIVE
            if payload[0] != "{" and payload.strip() == "[DONE]":
                return _END
        elif event != "error":
            return _KEEPALIVE  # a named event the chunk protocol has no use for
        if event == "message" and payload[0] == "{":
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                obj = None
            if obj is not None:
                if self._envelope is None and type(obj) is dict:
                    self._envelope = {key: obj[key] for key in _ENVELOPE_KEYS if key in obj}
                text = _content_of(obj)
                if text is not None:
                    return _new(Decoded, (_CONTENT, text, -1, None, None, (), None))
                return _general(classify_chunk(obj, payload), obj, payload)
        chunk = parse_chunk(payload, event=event)  # raises ProtocolError, naming the fault
        return _general(chunk, None, payload)


def _content_of(obj: Any) -> str | None:
    """The text of the common chunk (one choice, its delta a non-empty content and at most a
    role); None for any other shape, which the general classification reads."""
    # Each value is looked at for its type before it is taken as that type (compiled, the
    # annotated locals are typed: a dict's ``get`` is then a C call).
    if type(obj) is not dict:
        return None
    chunk: dict[str, Any] = obj
    if chunk.get("error") is not None or chunk.get("usage") is not None:
        return None
    found = chunk.get("choices")
    if type(found) is not list:
        return None
    choices: list[Any] = found
    if len(choices) != 1 or chunk.get("object") == "error":
        return None
    first = choices[0]
    if type(first) is not dict:
        return None
    choice: dict[str, Any] = first
    if choice.get("finish_reason") is not None:
        return None
    found = choice.get("delta")
    if type(found) is dict:
        delta: dict[str, Any] = found
        if len(delta) != 1 and not (len(delta) == 2 and "role" in delta):
            return None
        text = delta.get("content")
    elif found is None:  # the completions shape
        text = choice.get("text")
    else:
        return None
    if type(text) is not str or not text:
        return None
    return text


def _general(chunk: Chunk, obj: Any, payload: str) -> Decoded:
    """What the general classification said, as the timeline sees it."""
    if chunk.kind is EventKind.ERROR:
        return Decoded(EventKind.ERROR, error=chunk.error or "error event with no message")
    usage = chunk.usage
    finish = chunk.finish_reason
    finished: tuple[int, ...] = ()
    if finish is not None:  # (rare: once per choice)
        finished = _finished_of(obj if obj is not None else orjson.loads(payload))
    return Decoded(
        chunk.kind,
        chunk.text,
        usage.get("completion_tokens", -1) if usage is not None else -1,
        finish,
        usage,
        finished,
    )


def _finished_of(obj: Any) -> tuple[int, ...]:
    """The choices a chunk's finish reasons end.

    With ``n > 1`` the answer is over once every choice ended, not after ``n`` finish
    reasons: an upstream may repeat one choice's, or end several choices in one chunk.
    """
    choices = obj.get("choices") or () if type(obj) is dict else ()
    return tuple(
        index if type(index := choice.get("index", position)) is int else position
        for position, choice in enumerate(choices)
        if type(choice) is dict and choice.get("finish_reason") is not None
    )
