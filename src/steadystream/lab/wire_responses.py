"""The lab's bytes in the OpenAI Responses API's shape (``POST /v1/responses``).

A stream is ``event: <type>`` events whose JSON repeats the type and carries a
``sequence_number`` counting from 0, with no ``[DONE]``:

    response.created, response.in_progress, response.output_item.added (a message),
    response.content_part.added (output_text), response.output_text.delta per content event,
    then response.output_text.done, response.content_part.done, response.output_item.done
    and response.completed (or response.incomplete for max_output_tokens), with the usage;
    or, on an error, ``error`` then response.failed.

Every shape is the ``openai`` SDK's (``openai.types.responses``; tests/lab/test_dialects.py
validates each event against it). The delta envelope is preformatted with its sequence
number last, so an event is its prefix, the escaped text, its middle and the number.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from steadystream._types import EventKind
from steadystream.lab.wire import TEXT_MARK, Part, split_envelope
from steadystream.protocol.openai import error_payload
from steadystream.protocol.sse import encode_event

__all__ = ["ResponsesFormat"]

_DELTA = "response.output_text.delta"
_DELTA_HEAD = b"event: " + _DELTA.encode() + b"\ndata: "
_ERROR_CODE = "server_error"


class ResponsesFormat:
    """Preformatted Responses API events for one request; a :class:`~.wire.Wire`.

    ``settings``: what the request set that a response object repeats (``instructions``,
    ``max_output_tokens``, ``reasoning``, ``temperature``, ``top_p``).
    """

    opening_first: ClassVar[bool] = True

    __slots__ = ("_base", "_item_id", "_middle", "_prefix", "_sequence")

    def __init__(
        self,
        *,
        response_id: str,
        item_id: str,
        model: str,
        created: int,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self._item_id = item_id
        self._sequence = 0
        self._base: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": created,
            "status": "in_progress",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "metadata": {},
            "model": model,
            "output": [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": None,
        }
        for key, value in (settings or {}).items():
            if value is not None:
                self._base[key] = value
        delta = orjson.dumps(
            {
                "type": _DELTA,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": TEXT_MARK,
                "logprobs": [],
            }
        )
        prefix, suffix = split_envelope(delta)
        self._prefix = _DELTA_HEAD + prefix
        self._middle = suffix[:-1] + b',"sequence_number":'  # the number goes last

    # -- streaming ------------------------------------------------------------------------------

    def opening(self) -> list[Part]:
        created = self._response("in_progress")
        return [
            (EventKind.ROLE, self._event("response.created", {"response": created})),
            (EventKind.KEEPALIVE, self._event("response.in_progress", {"response": created})),
            (
                EventKind.KEEPALIVE,
                self._event(
                    "response.output_item.added",
                    {"output_index": 0, "item": self._message("in_progress", None)},
                ),
            ),
            (
                EventKind.KEEPALIVE,
                self._event("response.content_part.added", {**self._at(), "part": _part("")}),
            ),
        ]

    def content(self, text: str) -> bytes:
        sequence = self._sequence
        self._sequence = sequence + 1
        return b"%b%b%b%d}\n\n" % (self._prefix, orjson.dumps(text)[1:-1], self._middle, sequence)

    def size(self, text: str) -> int:
        escaped = len(orjson.dumps(text)) - 2
        return len(self._prefix) + escaped + len(self._middle) + len(str(self._sequence)) + 3

    def closing(
        self, reason: str, prompt_tokens: int, completion_tokens: int, text: str
    ) -> tuple[list[Part], list[Part]]:
        status = "completed" if reason == "stop" else "incomplete"
        message = self._message(status, text)
        before: list[Part] = [
            (
                EventKind.KEEPALIVE,
                self._event(
                    "response.output_text.done", {**self._at(), "text": text, "logprobs": []}
                ),
            ),
            (
                EventKind.KEEPALIVE,
                self._event("response.content_part.done", {**self._at(), "part": _part(text)}),
            ),
            (
                EventKind.KEEPALIVE,
                self._event("response.output_item.done", {"output_index": 0, "item": message}),
            ),
        ]
        final = self._final(status, message, prompt_tokens, completion_tokens)
        return before, [(None, self._event(f"response.{status}", {"response": final}))]

    def failure(self, message: str) -> list[Part]:
        error = self._event("error", {"code": _ERROR_CODE, "message": message, "param": None})
        failed = self._response("failed", error={"code": _ERROR_CODE, "message": message})
        return [
            (EventKind.ERROR, error),
            (None, self._event("response.failed", {"response": failed})),
        ]

    def broken(self, text: str) -> list[Part]:
        return [(EventKind.ERROR, self._prefix + orjson.dumps(text)[1:-1] + b'"\n\n')]

    # -- whole ----------------------------------------------------------------------------------

    def whole(
        self, text: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        status = "completed" if reason == "stop" else "incomplete"
        return self._final(status, self._message(status, text), prompt_tokens, completion_tokens)

    @staticmethod
    def whole_failure(message: str) -> tuple[int, bytes]:
        return 500, orjson.dumps(error_payload(message, type="server_error", code=_ERROR_CODE))

    # -- helpers --------------------------------------------------------------------------------

    def _event(self, type: str, fields: dict[str, Any]) -> bytes:
        payload = {"type": type, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        return encode_event(orjson.dumps(payload), event=type)

    def _at(self) -> dict[str, Any]:
        return {"item_id": self._item_id, "output_index": 0, "content_index": 0}

    def _message(self, status: str, text: str | None) -> dict[str, Any]:
        return {
            "id": self._item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [] if text is None else [_part(text)],
        }

    def _response(self, status: str, **changes: Any) -> dict[str, Any]:
        return {**self._base, "status": status, **changes}

    def _final(
        self, status: str, message: dict[str, Any], prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        usage = {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens,
        }
        incomplete = None if status == "completed" else {"reason": "max_output_tokens"}
        return self._response(status, output=[message], usage=usage, incomplete_details=incomplete)


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}
