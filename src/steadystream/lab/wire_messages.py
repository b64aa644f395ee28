"""The lab's bytes in Anthropic's Messages API shape (``POST /v1/messages``), and its errors.

A stream is ``event: <type>`` events whose JSON repeats the type:

    message_start (the message, empty, with the input tokens), content_block_start (a text
    block at index 0), ping, content_block_delta (a text_delta) per content event, then
    content_block_stop, message_delta (stop_reason end_turn or max_tokens, the output
    tokens) and message_stop; or, on an error, ``event: error`` (overloaded_error), and
    nothing after it.

A refused request gets ``{"type": "error", "error": {"type", "message"}}`` with the status
the error type has at Anthropic (:func:`refusal`; the shape is steadystream/_api_errors.py's).
Every shape is the ``anthropic`` SDK's (``anthropic.types``; tests/lab/test_dialects.py
validates each event against it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
from starlette.responses import Response

from steadystream._api_errors import ApiError
from steadystream._types import EventKind
from steadystream.lab.wire import TEXT_MARK, Part, split_envelope
from steadystream.protocol.sse import encode_event

__all__ = ["MessagesFormat", "refusal"]

_OVERLOADED = 529  # Anthropic's status for overloaded_error
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def refusal(error: ApiError, headers: dict[str, str] | None = None) -> Response:
    """A refused request in Anthropic's shape (the field it names first in its message)."""
    return error.response(headers, "anthropic")


class MessagesFormat:
    """Preformatted Messages API events for one request; a :class:`~.wire.Wire`."""

    opening_first: ClassVar[bool] = True

    __slots__ = ("_id", "_input_tokens", "_model", "_prefix", "_suffix")

    def __init__(self, *, message_id: str, model: str, input_tokens: int) -> None:
        self._id = message_id
        self._model = model
        self._input_tokens = input_tokens
        delta = {"type": "text_delta", "text": TEXT_MARK}
        template = _event("content_block_delta", {"index": 0, "delta": delta})
        self._prefix, self._suffix = split_envelope(template)

    # -- streaming ------------------------------------------------------------------------------

    def opening(self) -> list[Part]:
        usage = {"input_tokens": self._input_tokens, "output_tokens": 1}
        start = {"message": self._message([], None, usage)}
        block = {"index": 0, "content_block": {"type": "text", "text": ""}}
        return [
            (EventKind.ROLE, _event("message_start", start)),
            (EventKind.KEEPALIVE, _event("content_block_start", block)),
            (EventKind.KEEPALIVE, _event("ping", {})),
        ]

    def content(self, text: str) -> bytes:
        return self._prefix + orjson.dumps(text)[1:-1] + self._suffix

    def size(self, text: str) -> int:
        return len(self._prefix) + len(orjson.dumps(text)) - 2 + len(self._suffix)

    def closing(
        self, reason: str, prompt_tokens: int, completion_tokens: int, text: str
    ) -> tuple[list[Part], list[Part]]:
        delta = {"stop_reason": _STOP_REASONS[reason], "stop_sequence": None}
        before: list[Part] = [
            (EventKind.KEEPALIVE, _event("content_block_stop", {"index": 0})),
            (
                EventKind.EMPTY,
                _event(
                    "message_delta", {"delta": delta, "usage": {"output_tokens": completion_tokens}}
                ),
            ),
        ]
        return before, [(None, _event("message_stop", {}))]

    @staticmethod
    def failure(message: str) -> list[Part]:
        error = {"error": {"type": "overloaded_error", "message": message}}
        return [(EventKind.ERROR, _event("error", error))]

    def broken(self, text: str) -> list[Part]:
        return [(EventKind.ERROR, self._prefix + orjson.dumps(text)[1:-1] + b'"\n\n')]

    # -- whole ----------------------------------------------------------------------------------

    def whole(
        self, text: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        usage = {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}
        return self._message([{"type": "text", "text": text}], _STOP_REASONS[reason], usage)

    @staticmethod
    def whole_failure(message: str) -> tuple[int, bytes]:
        return _OVERLOADED, ApiError(_OVERLOADED, message).body("anthropic")

    def _message(
        self, content: list[dict[str, Any]], stop_reason: str | None, usage: dict[str, int]
    ) -> dict[str, Any]:
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }


def _event(type: str, fields: dict[str, Any]) -> bytes:
    return encode_event(orjson.dumps({"type": type, **fields}), event=type)
