"""A chat answer as the OpenAI Responses API gives it: event by event, or whole.

The stream, as the chat pieces arrive (every event numbered from 0 by ``sequence_number``)::

    first piece      response.created, response.in_progress
    content          [a message item opens: response.output_item.added,
                     response.content_part.added (output_text)] response.output_text.delta
    reasoning        [a reasoning item opens, its part reasoning_text]
                     response.reasoning_text.delta
    finish reason    the open item ends: its .done, response.content_part.done,
                     response.output_item.done
    [DONE]           response.completed, with the usage chunk's counts (response.incomplete
                     with max_output_tokens for chat's ``length``, content_filter for its own)

Content after reasoning (or reasoning after content) ends one item and opens the next at the
next ``output_index``; a piece that holds both goes reasoning first (``texts_of``). An answer
with no text still gets its (empty) message item.

The closing events repeat each item's whole text (the API's shape: the SDK's final response
is built from them), so the translator holds the answer's text: references to the pieces'
own strings, which the relay's progress holds anyway, bounded by a quarter of ``max_text``
(``limits.max_response_bytes``); an answer past it ends the stream with an in-band error
rather than close it with a text cut short.
"""

from __future__ import annotations

import time
from typing import Any

from steadystream._types import EventKind
from steadystream.gateway.events import Failure, Piece, encode_event
from steadystream.gateway.failover import Cause
from steadystream.gateway.translation.chat import ChatAnswer, comment_only, count, texts_of

__all__ = ["ResponsesTranslator", "error_event", "failed_after", "whole_response"]

_CONTENT = EventKind.CONTENT
_REASONING = EventKind.REASONING
_KEEPALIVE = EventKind.KEEPALIVE
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_SETTINGS = ("instructions", "max_output_tokens", "temperature", "top_p")


class _Item:
    """One output item: a message (its output_text) or a reasoning item (its reasoning_text)."""

    __slots__ = ("id", "index", "kind", "texts")

    def __init__(self, kind: EventKind, ident: str, index: int) -> None:
        self.kind = kind
        self.index = index
        prefix = "msg" if kind is _CONTENT else "rs"
        self.id = f"{prefix}_{ident}_{index}"
        self.texts: list[str] = []

    def part(self, text: str) -> dict[str, Any]:
        if self.kind is _CONTENT:
            return {"type": "output_text", "text": text, "annotations": []}
        return {"type": "reasoning_text", "text": text}

    def whole(self, status: str, text: str | None = None) -> dict[str, Any]:
        """The item as ``output`` lists it (``text`` None: as it opens, with no part)."""
        content = [] if text is None else [self.part(text)]
        if self.kind is _CONTENT:
            return {
                "id": self.id,
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": content,
            }
        return {
            "id": self.id,
            "type": "reasoning",
            "status": status,
            "summary": [],
            "content": content,
        }


class ResponsesTranslator:
    """One chat stream as a Responses stream (see the module docstring); a
    :class:`~steadystream.gateway.translation.chat.StreamTranslator`."""

    __slots__ = (
        "_base",
        "_ended",
        "_failure",
        "_finish",
        "_held",
        "_ident",
        "_items",
        "_max_text",
        "_open",
        "_sequence",
        "_usage",
    )

    def __init__(
        self,
        ident: str,
        *,
        model: str,
        created: int,
        request: dict[str, Any],
        max_text: int,
    ) -> None:
        self._ident = ident
        self._base = response_base(ident, model, created, request)
        self._max_text = max_text
        self._sequence = 0
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._held = 0
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._ended = False
        self._failure: Failure | None = None

    @property
    def started(self) -> bool:
        return self._sequence > 0

    @property
    def last_sequence(self) -> int:
        """The ``sequence_number`` of the last event made (-1: none)."""
        return self._sequence - 1

    @property
    def failure(self) -> Failure | None:
        return self._failure

    def rewrite(self, piece: Piece) -> Piece | None:
        kind = piece.kind
        if kind is _KEEPALIVE:
            return comment_only(piece)
        out: list[bytes] = []
        if kind is None:  # [DONE]
            self._close(out)
            return piece._replace(raw=b"".join(out))
        reasoning = content = ""
        if kind is _CONTENT or kind is _REASONING:
            reasoning, content = texts_of(piece)
            # Checked before anything is numbered: a refused piece leaves no gap. The closing
            # events repeat the text four times, so a quarter of the limit is held.
            self._held += len(reasoning) + len(content)
            if self._held > self._max_text // 4:
                self._failure = Failure(
                    Cause.OVERSIZED_EVENT,
                    f"the answer grew past {self._max_text // 4} characters (a quarter of"
                    " limits.max_response_bytes: a Responses stream translated from chat"
                    " repeats its text four times in its closing events)",
                )
                return None
        self._begin(out)
        if reasoning:
            self._delta(_REASONING, reasoning, out)
        if content:
            self._delta(_CONTENT, content, out)
        if piece.usage_counts is not None:
            self._usage = piece.usage_counts
        if piece.finish is not None:
            self._finish = piece.finish
            self._end_item(out)
        return piece._replace(raw=b"".join(out))

    def end(self) -> bytes:
        out: list[bytes] = []
        self._close(out)
        return b"".join(out)

    def error(self, message: str, code: str) -> bytes:
        """``error``, then ``response.failed`` with what the client had of the output (after
        ``response.created``, when nothing went before: the SDK's stream starts there)."""
        out: list[bytes] = []
        self._begin(out)
        failed = self._response(
            "failed",
            error={"code": "server_error", "message": message},
            output=[item.whole("incomplete", "".join(item.texts)) for item in self._items],
        )
        out.append(self._event("error", code=code, message=message, param=None))
        out.append(self._event("response.failed", response=failed))
        return b"".join(out)

    # -- the events -----------------------------------------------------------------------------

    def _begin(self, out: list[bytes]) -> None:
        if not self.started:
            response = self._response("in_progress")
            out.append(self._event("response.created", response=response))
            out.append(self._event("response.in_progress", response=response))

    def _delta(self, kind: EventKind, text: str, out: list[bytes]) -> None:
        item = self._open
        if item is None or item.kind is not kind:
            self._end_item(out)
            item = self._open_item(kind, out)
        item.texts.append(text)
        name = "response.output_text.delta" if kind is _CONTENT else "response.reasoning_text.delta"
        fields = self._at(item)
        if kind is _CONTENT:
            fields["logprobs"] = []
        out.append(self._event(name, **fields, delta=text))

    def _open_item(self, kind: EventKind, out: list[bytes]) -> _Item:
        item = _Item(kind, self._ident, len(self._items))
        self._items.append(item)
        self._open = item
        out.append(
            self._event(
                "response.output_item.added",
                output_index=item.index,
                item=item.whole("in_progress"),
            )
        )
        out.append(self._event("response.content_part.added", **self._at(item), part=item.part("")))
        return item

    def _end_item(self, out: list[bytes]) -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        text = "".join(item.texts)
        at = self._at(item)
        if item.kind is _CONTENT:
            out.append(self._event("response.output_text.done", **at, text=text, logprobs=[]))
        else:
            out.append(self._event("response.reasoning_text.done", **at, text=text))
        out.append(self._event("response.content_part.done", **at, part=item.part(text)))
        out.append(
            self._event(
                "response.output_item.done",
                output_index=item.index,
                item=item.whole(self._status(), text),
            )
        )

    def _close(self, out: list[bytes]) -> None:
        """The end of the answer: the open item's end, then the final response."""
        if self._ended:
            return
        self._ended = True
        self._begin(out)
        self._end_item(out)
        if not any(item.kind is _CONTENT for item in self._items):
            self._open_item(_CONTENT, out)  # an answer with no text has an empty message
            self._end_item(out)
        status = self._status()
        final = self._response(
            status,
            output=[item.whole(status, "".join(item.texts)) for item in self._items],
            usage=response_usage(self._usage),
            incomplete_details=_incomplete(self._finish),
        )
        out.append(self._event(f"response.{status}", response=final))

    def _status(self) -> str:
        return "completed" if _incomplete(self._finish) is None else "incomplete"

    def _at(self, item: _Item) -> dict[str, Any]:
        return {"item_id": item.id, "output_index": item.index, "content_index": 0}

    def _response(self, status: str, **changes: Any) -> dict[str, Any]:
        return {**self._base, "status": status, **changes}

    def _event(self, name: str, **fields: Any) -> bytes:
        sequence = self._sequence
        self._sequence = sequence + 1
        return encode_event({"type": name, **fields, "sequence_number": sequence}, name)


def failed_after(
    envelope: dict[str, Any] | None,
    request: dict[str, Any],
    sequence: int,
    message: str,
    code: str,
    ident: str = "",
) -> bytes:
    """The end of an upstream's own Responses stream that failed mid-way: ``error``, then a
    whole ``response.failed`` (the SDK's stream helper checks it names the response that
    ``response.created`` did), numbered on from ``sequence``, the last the client got.

    With no ``envelope`` the client never had a ``response.created`` (the SDK's stream
    starts there): one goes first, for a response ``resp_IDENT``.
    """
    out = b""
    if envelope is None:
        opened = response_base(ident, str(request.get("model", "")), int(time.time()), request)
        sequence += 1
        out = encode_event(
            {"type": "response.created", "response": opened, "sequence_number": sequence},
            "response.created",
        )
        envelope = {key: opened[key] for key in ("id", "created_at", "model")}
    given = envelope
    created = given.get("created_at")
    failed = response_base(
        "",
        str(given.get("model", request.get("model", ""))),
        created if isinstance(created, int) else 0,
        request,
    )
    failed.update(status="failed", error={"code": "server_error", "message": message})
    if isinstance(given.get("id"), str):
        failed["id"] = given["id"]
    return (
        out
        + error_event(message, code, sequence + 1)
        + encode_event(
            {"type": "response.failed", "response": failed, "sequence_number": sequence + 2},
            "response.failed",
        )
    )


def error_event(message: str, code: str, sequence: int) -> bytes:
    """The Responses API's streamed ``error`` event (what its SDK raises on)."""
    error = {"type": "error", "code": code, "message": message, "param": None}
    return encode_event(error | {"sequence_number": sequence}, "error")


def response_base(ident: str, model: str, created: int, request: dict[str, Any]) -> dict[str, Any]:
    """The fields every response object of the answer repeats; the request's settings as the
    client gave them."""
    base: dict[str, Any] = {
        "id": f"resp_{ident}",
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
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": None,
    }
    for key in _SETTINGS:
        if request.get(key) is not None:
            base[key] = request[key]
    return base


def response_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """A chat usage object in the Responses API's shape (None: the upstream gave none, or
    no count in it)."""
    prompt = count(usage, "prompt_tokens")
    completion = count(usage, "completion_tokens")
    if prompt is None and completion is None:  # (or none that is a count)
        return None
    prompt = prompt or 0
    completion = completion or 0
    total = count(usage, "total_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": count(usage, "cached_tokens", "prompt_tokens_details") or 0,
            "cache_write_tokens": 0,  # (chat does not say)
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": count(usage, "reasoning_tokens", "completion_tokens_details") or 0
        },
        "total_tokens": total if total is not None else prompt + completion,
    }


def _incomplete(finish: str | None) -> dict[str, str] | None:
    reason = _INCOMPLETE.get(finish) if finish is not None else None
    return None if reason is None else {"reason": reason}


def whole_response(
    answer: ChatAnswer, ident: str, *, model: str, created: int, request: dict[str, Any]
) -> dict[str, Any]:
    """A whole chat completion's answer as a Responses API response object."""
    incomplete = _incomplete(answer.finish)
    status = "completed" if incomplete is None else "incomplete"
    output = []
    if answer.reasoning:
        reasoning = _Item(_REASONING, ident, 0)
        output.append(reasoning.whole(status, answer.reasoning))
    message = _Item(_CONTENT, ident, len(output))
    output.append(message.whole(status, answer.text))
    return {
        **response_base(ident, model, created, request),
        "status": status,
        "output": output,
        "usage": response_usage(answer.usage),
        "incomplete_details": incomplete,
    }
