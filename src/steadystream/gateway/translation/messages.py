"""A chat answer as Anthropic's Messages API gives it: event by event, or whole.

The stream, as the chat pieces arrive::

    first piece      message_start (the input tokens when the piece carries usage, else 0)
    content          [a text block opens: content_block_start] content_block_delta
                     (text_delta)
    reasoning        [a thinking block opens] content_block_delta (thinking_delta)
    finish reason    content_block_stop of the open block
    [DONE]           message_delta (the stop reason; the usage chunk's output tokens, and its
                     input tokens), message_stop

Content after reasoning (or reasoning after content) stops one block and starts the next at
the next index; a piece that holds both goes reasoning first (``texts_of``). An answer with
no text still gets its (empty) text block. Chat's finish reasons become stop reasons:
``stop`` is ``end_turn``, ``length`` ``max_tokens``, ``content_filter`` ``refusal``, and
``tool_calls`` ``end_turn`` (the calls are not sent on). Where the upstream gave no usage,
the output tokens are the text deltas counted.

The translator keeps a few counts and the open block's index: nothing grows with the answer.
"""

from __future__ import annotations

from typing import Any

from steadystream._types import EventKind
from steadystream.gateway.events import ChunkFormat, Failure, Piece, encode_event
from steadystream.gateway.translation.chat import ChatAnswer, comment_only, count, texts_of

__all__ = ["MessagesTranslator", "whole_message"]

_CONTENT = EventKind.CONTENT
_REASONING = EventKind.REASONING
_KEEPALIVE = EventKind.KEEPALIVE
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
}
"""Chat's finish reasons as Messages' stop reasons (any other: ``end_turn``). Chat's
``tool_calls`` too is ``end_turn``: tool calls are not translated (a request with tools is
refused), and ``tool_use`` would send a client's tool loop looking for blocks it never got."""


class MessagesTranslator:
    """One chat stream as a Messages stream (see the module docstring); a
    :class:`~steadystream.gateway.translation.chat.StreamTranslator`."""

    __slots__ = (
        "_blocks",
        "_deltas",
        "_ended",
        "_finish",
        "_ident",
        "_model",
        "_open",
        "_started",
        "_text_block",
        "_usage",
    )

    def __init__(self, ident: str, *, model: str) -> None:
        self._ident = ident
        self._model = model
        self._started = False
        self._blocks = 0  # content blocks started so far
        self._open: EventKind | None = None  # the kind of the open block
        self._text_block = False  # whether a text block was started
        self._deltas = 0
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._ended = False

    @property
    def started(self) -> bool:
        return self._started

    @property
    def failure(self) -> Failure | None:
        return None  # it holds nothing that could grow past a bound

    def rewrite(self, piece: Piece) -> Piece | None:
        kind = piece.kind
        if kind is _KEEPALIVE:
            return comment_only(piece)
        out: list[bytes] = []
        if kind is None:  # [DONE]
            self._close(out)
            return piece._replace(raw=b"".join(out))
        if piece.usage_counts is not None:
            self._usage = piece.usage_counts
        self._begin(out)
        if kind is _CONTENT or kind is _REASONING:
            reasoning, content = texts_of(piece)
            if reasoning:
                self._delta(_REASONING, reasoning, out)
            if content:
                self._delta(_CONTENT, content, out)
        if piece.finish is not None:
            self._finish = piece.finish
            self._stop_block(out)
        return piece._replace(raw=b"".join(out))

    def end(self) -> bytes:
        out: list[bytes] = []
        self._close(out)
        return b"".join(out)

    def error(self, message: str, code: str) -> bytes:
        """Anthropic's ``error`` event, after ``message_start`` when nothing went before."""
        out: list[bytes] = []
        self._begin(out)
        out.append(ChunkFormat.error(message, code, "messages"))
        return b"".join(out)

    # -- the events -----------------------------------------------------------------------------

    def _begin(self, out: list[bytes]) -> None:
        if self._started:
            return
        self._started = True
        usage = {"input_tokens": count(self._usage, "prompt_tokens") or 0, "output_tokens": 0}
        message = message_object(self._ident, self._model, [], None, usage)
        out.append(_event("message_start", message=message))

    def _delta(self, kind: EventKind, text: str, out: list[bytes]) -> None:
        if self._open is not kind:
            self._stop_block(out)
            self._start_block(kind, out)
        self._deltas += 1
        if kind is _CONTENT:
            delta = {"type": "text_delta", "text": text}
        else:
            delta = {"type": "thinking_delta", "thinking": text}
        out.append(_event("content_block_delta", index=self._blocks - 1, delta=delta))

    def _start_block(self, kind: EventKind, out: list[bytes]) -> None:
        if kind is _CONTENT:
            block: dict[str, Any] = {"type": "text", "text": ""}
            self._text_block = True
        else:
            block = {"type": "thinking", "thinking": "", "signature": ""}
        out.append(_event("content_block_start", index=self._blocks, content_block=block))
        self._blocks += 1
        self._open = kind

    def _stop_block(self, out: list[bytes]) -> None:
        if self._open is None:
            return
        self._open = None
        out.append(_event("content_block_stop", index=self._blocks - 1))

    def _close(self, out: list[bytes]) -> None:
        if self._ended:
            return
        self._ended = True
        self._begin(out)
        self._stop_block(out)
        if not self._text_block:  # an answer with no text has an empty text block
            self._start_block(_CONTENT, out)
            self._stop_block(out)
        usage = message_usage(self._usage, self._deltas)
        delta = {"stop_reason": stop_reason(self._finish), "stop_sequence": None}
        out.append(_event("message_delta", delta=delta, usage=usage))
        out.append(_event("message_stop"))


def stop_reason(finish: str | None) -> str:
    """A chat finish reason as a Messages stop reason."""
    return STOP_REASONS.get(finish, "end_turn") if finish is not None else "end_turn"


def message_usage(usage: dict[str, Any] | None, deltas: int | None) -> dict[str, Any]:
    """A chat usage as a Messages usage: the output tokens (the ``deltas`` counted where the
    upstream gave none), and the input tokens where given. Chat's prompt tokens include the
    cached ones, Messages' input tokens do not: those are ``cache_read_input_tokens``."""
    output = count(usage, "completion_tokens")
    out: dict[str, Any] = {"output_tokens": output if output is not None else (deltas or 0)}
    prompt = count(usage, "prompt_tokens")
    if prompt is not None:
        cached = count(usage, "cached_tokens", "prompt_tokens_details")
        if cached is not None and 0 < cached <= prompt:
            out["input_tokens"] = prompt - cached
            out["cache_read_input_tokens"] = cached
        else:
            out["input_tokens"] = prompt
    elif deltas is None:  # (a whole message's usage has its input tokens, 0 if unknown)
        out["input_tokens"] = 0
    return out


def message_object(
    ident: str,
    model: str,
    content: list[dict[str, Any]],
    stop: str | None,
    usage: dict[str, int],
) -> dict[str, Any]:
    """A Messages API message object."""
    return {
        "id": f"msg_{ident}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def whole_message(answer: ChatAnswer, ident: str, *, model: str) -> dict[str, Any]:
    """A whole chat completion's answer as a Messages API message."""
    content: list[dict[str, Any]] = []
    if answer.reasoning:
        content.append({"type": "thinking", "thinking": answer.reasoning, "signature": ""})
    content.append({"type": "text", "text": answer.text})
    usage = message_usage(answer.usage, None)
    return message_object(ident, model, content, stop_reason(answer.finish), usage)


def _event(name: str, **fields: Any) -> bytes:
    return encode_event({"type": name, **fields}, name)
