"""The bytes the lab writes, preformatted: what the writer asks of each API's wire shape.

A :class:`Wire` is one request's bytes in one API's shape (:class:`SseFormat` for chat and
completions, shaped like vLLM's OpenAI server; :mod:`~steadystream.lab.wire_responses` and
:mod:`~steadystream.lab.wire_messages` for the Responses API and Anthropic Messages). The
writer (:mod:`~steadystream.lab.responses`) knows only this protocol.

Each content event is a fixed envelope around the text, so the envelope is built once per
request and split around a marker (:func:`split_envelope`); writing an event is then a few
concatenations and one JSON string escape.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import orjson

from steadystream._types import EventKind
from steadystream.protocol.openai import (
    chat_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
    usage_chunk,
)
from steadystream.protocol.sse import DONE

__all__ = ["TEXT_MARK", "Part", "SseFormat", "Wire", "data_of", "split_envelope"]

Part = tuple[EventKind | None, bytes]
"""One SSE event the lab writes, and its kind in the ground truth; None: the stream's end
marker (``[DONE]``, ``message_stop``, ``response.completed``), which is not a timeline event."""

TEXT_MARK = "\x00lab-text\x00"
"""The text a content envelope is built around, to be cut out by :func:`split_envelope`."""
_MARK_JSON = orjson.dumps(TEXT_MARK)[1:-1]


def split_envelope(event: bytes) -> tuple[bytes, bytes]:
    """An encoded event built around :data:`TEXT_MARK`, cut in two where the text goes."""
    prefix, suffix = event.split(_MARK_JSON)
    return prefix, suffix


def data_of(event: bytes) -> bytes:
    """The data of one encoded single-line event (what a whole response carries instead)."""
    return event.partition(b"data: ")[2].rstrip()


class Wire(Protocol):
    """One request's bytes in one API's shape. Stateful where the API numbers its events:
    build the parts in the order they are written."""

    opening_first: ClassVar[bool]
    """Whether the opening goes out before an ending that comes with no content before it
    (an error after 0 tokens): a Responses or Messages stream is not one without it."""

    def opening(self) -> list[Part]:
        """What goes out before the first content event, in the same write."""
        ...

    def content(self, text: str) -> bytes:
        """The next content event, carrying ``text``."""
        ...

    def size(self, text: str) -> int:
        """How many bytes :meth:`content` would write for ``text`` next (it writes nothing)."""
        ...

    def closing(
        self, reason: str, prompt_tokens: int, completion_tokens: int, text: str
    ) -> tuple[list[Part], list[Part]]:
        """The end of a complete answer (``reason``: stop or length; ``text``: all of it),
        split where a silent finish pauses: before the silence, and after it."""
        ...

    def failure(self, message: str) -> list[Part]:
        """An in-band error and what follows it."""
        ...

    def broken(self, text: str) -> list[Part]:
        """A content event cut off mid-JSON around ``text`` (a broken upstream), and what
        follows it; a whole response is the first one's data."""
        ...

    def whole(
        self, text: str, reason: str, prompt_tokens: int, completion_tokens: int
    ) -> dict[str, Any]:
        """The non-streaming response body."""
        ...

    def whole_failure(self, message: str) -> tuple[int, bytes]:
        """A non-streaming error: its status and body."""
        ...


class SseFormat:
    """Preformatted SSE bytes for one request (chat or completions endpoint); a :class:`Wire`."""

    opening_first: ClassVar[bool] = False  # as the lab has always: the role goes with content

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
            template = encode_chunk(chat_chunk(completion_id, model, created, content=TEXT_MARK))
        else:
            template = encode_chunk(completion_chunk(completion_id, model, created, text=TEXT_MARK))
        self._prefix, self._suffix = split_envelope(template)

    @property
    def object_name(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def role(self) -> bytes:
        """The role-only first chunk (chat only), as vLLM sends it."""
        return encode_chunk(
            chat_chunk(self._id, self._model, self._created, role="assistant", content="")
        )

    def opening(self) -> list[Part]:
        return [(EventKind.ROLE, self.role())] if self.chat else []

    def content(self, text: str) -> bytes:
        return self._prefix + orjson.dumps(text)[1:-1] + self._suffix

    def size(self, text: str) -> int:
        return len(self.content(text))

    def closing(
        self, reason: str, prompt_tokens: int, completion_tokens: int, text: str
    ) -> tuple[list[Part], list[Part]]:
        after: list[Part] = []
        if self.include_usage:
            after.append((EventKind.USAGE, self.usage(prompt_tokens, completion_tokens)))
        after.append((None, DONE))
        return [(EventKind.EMPTY, self.finish(reason))], after

    def failure(self, message: str) -> list[Part]:
        return [(EventKind.ERROR, self.error(message)), (None, DONE)]

    def broken(self, text: str) -> list[Part]:
        return [(EventKind.ERROR, self.malformed(text)), (None, DONE)]

    def whole_failure(self, message: str) -> tuple[int, bytes]:
        return 500, orjson.dumps(error_payload(message, type="server_error", code=500))

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
