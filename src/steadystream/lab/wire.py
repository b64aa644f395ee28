"""The bytes the lab writes: SSE events shaped like vLLM's OpenAI server, preformatted.

Each content event is a fixed envelope around the text, so the envelope is built once per
request (through the shared chunk builders) and split around a marker; writing an event is
then two concatenations and one JSON string escape.
"""

from __future__ import annotations

from typing import Any

import orjson

from steadystream.protocol.openai import (
    chat_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
    usage_chunk,
)
from steadystream.protocol.sse import DONE

__all__ = ["SseFormat"]

_MARK = "\x00lab-text\x00"
_MARK_JSON = orjson.dumps(_MARK)[1:-1]


class SseFormat:
    """Preformatted SSE bytes for one request (chat or completions endpoint)."""

    __slots__ = ("_created", "_id", "_model", "_prefix", "_suffix", "chat", "include_usage")

    def __init__(
        self, *, chat: bool, completion_id: str, model: str, created: int, include_usage: bool
    ) -> None:
        self.chat = chat
        self.include_usage = include_usage
        self._id = completion_id
        self._model = model
        self._created = created
        if chat:
            template = encode_chunk(chat_chunk(completion_id, model, created, content=_MARK))
        else:
            template = encode_chunk(completion_chunk(completion_id, model, created, text=_MARK))
        self._prefix, self._suffix = template.split(_MARK_JSON)

    @property
    def object_name(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def role(self) -> bytes:
        """The role-only first chunk (chat only), as vLLM sends it."""
        return encode_chunk(
            chat_chunk(self._id, self._model, self._created, role="assistant", content="")
        )

    def content(self, text: str) -> bytes:
        return self._prefix + orjson.dumps(text)[1:-1] + self._suffix

    def finish(self, reason: str) -> bytes:
        if self.chat:
            payload = chat_chunk(self._id, self._model, self._created, finish_reason=reason)
        else:
            payload = completion_chunk(
                self._id, self._model, self._created, text="", finish_reason=reason
            )
        return encode_chunk(payload)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return encode_chunk(
            usage_chunk(
                self._id,
                self._model,
                self._created,
                object_name=self.object_name,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        )

    @staticmethod
    def error(message: str) -> bytes:
        """An in-band error event; vLLM sends it as a data line, then ``[DONE]``."""
        return encode_chunk(error_payload(message, type="server_error", code=500))

    @staticmethod
    def malformed(text: str) -> bytes:
        """A chunk cut off mid-JSON around ``text`` (a broken upstream, for faults)."""
        return (
            b'data: {"choices": [{"index": 0, "delta": {"content": ' + orjson.dumps(text) + b"\n\n"
        )

    @staticmethod
    def done() -> bytes:
        return DONE

    def whole(
        self, text: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        """The non-streaming response body."""
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": reason,
            }
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            kind = "text_completion"
        return {
            "id": self._id,
            "object": kind,
            "created": self._created,
            "model": self._model,
            "choices": [choice],
            "usage": usage,
        }
