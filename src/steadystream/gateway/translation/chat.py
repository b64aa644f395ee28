"""What the translators read from a chat upstream, and what every translator of a stream is.

A translator of a stream (:class:`StreamTranslator`) is the attempt's rewriter on the line
(gateway/_line_py.py): each chat piece in, the same piece out with the client's bytes in
``raw`` (its kind, text and usage kept, so the records and the watchdog read the stream as
they read any), or with no bytes when the piece says nothing the client's API says then.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import orjson

from steadystream._exceptions import ProtocolError
from steadystream._types import EventKind
from steadystream.gateway.events import Failure, Piece
from steadystream.protocol.chunks import is_count

__all__ = ["ChatAnswer", "StreamTranslator", "comment_only", "count", "read_answer", "texts_of"]

_REASONING = EventKind.REASONING
_REASONING_KEYS = ("reasoning_content", "reasoning")  # (as protocol/chunks.py reads them)


class StreamTranslator(Protocol):
    """Turns a chat stream's pieces into a client's typed events, one by one."""

    @property
    def started(self) -> bool:
        """Whether it has sent the client anything (then the stream cannot start over)."""

    @property
    def failure(self) -> Failure | None:
        """Why it dropped the last piece and the stream cannot go on (None: it did not)."""

    def rewrite(self, piece: Piece) -> Piece | None:
        """``piece`` with the client's bytes; None to drop it (check :attr:`failure`)."""

    def end(self) -> bytes:
        """The closing events, for an upstream that gave its finish and fell silent."""

    def error(self, message: str, code: str) -> bytes:
        """The in-band error that ends the stream, in the client's API, numbered on."""


def comment_only(piece: Piece) -> Piece | None:
    """A keepalive goes on when it is an SSE comment (every API's SSE skips those); an event
    of another name from a chat upstream means nothing to a typed client."""
    return piece if piece.raw.startswith(b":") else None


def texts_of(piece: Piece) -> tuple[str, str]:
    """``(reasoning, content)``: the text of a content or reasoning piece, by kind.

    A chunk whose delta carries several kinds (reasoning and content, content and a tool
    call's arguments) or several choices is one piece whose text holds all of it (so its
    byte counts stay right: protocol/chunks.py). Where the line kept the piece's payload it
    is read again, so that the reasoning and the content each go to their own item or block
    and neither a tool call's text nor another choice's goes to the client as the answer's
    (choice 0, else the first listed; a refusal is content, as the chunk reader says).
    Without the payload the text is taken as its kind.
    """
    payload = piece.payload
    if payload:
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = None
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if isinstance(choices, list) and choices:
            choice = _first_choice(choices)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                reasoning = next((delta[k] for k in _REASONING_KEYS if _text(delta.get(k))), "")
                return reasoning, _text(delta.get("content")) + _text(delta.get("refusal"))
            return "", _text(choice.get("text"))  # (the completions shape)
    return (piece.text, "") if piece.kind is _REASONING else ("", piece.text)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _message_text(value: Any) -> str:
    """A whole answer's text: a string, or content parts (``[{"type": "text", "text": ...}]``,
    their texts joined); anything else is none."""
    if isinstance(value, list):
        return "".join(
            part["text"]
            for part in value
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return _text(value)


def count(usage: dict[str, Any] | None, name: str, details: str = "") -> int | None:
    """One count of a chat usage object, or of its ``details`` object (None: not given, or
    no count: negative, not an integer, or past what a timeline holds). A stream's usage
    keeps the counts only, a detail's among them flat: looked for there too."""
    found: Any = usage
    for key in (details, name) if details else (name,):
        found = found.get(key) if isinstance(found, dict) else None
    if found is None and details and isinstance(usage, dict):
        found = usage.get(name)
    return found if is_count(found) else None


class ChatAnswer(NamedTuple):
    """What a whole chat completion answered (its choice 0)."""

    text: str
    reasoning: str
    finish: str | None
    usage: dict[str, Any] | None


def read_answer(body: bytes) -> ChatAnswer:
    """A chat completion's answer; :class:`ProtocolError` when ``body`` is not one."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"the answer is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise ProtocolError("the answer is not a chat completion (no choices)")
    choice = _first_choice(data["choices"])
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    text = _message_text(message.get("content")) + _text(message.get("refusal"))  # (as content)
    # (vLLM sends both names, one of them null: the first that holds text.)
    reasoning = _text(message.get("reasoning_content")) or _text(message.get("reasoning"))
    finish = choice.get("finish_reason")
    usage = data.get("usage")
    return ChatAnswer(
        text=text,
        reasoning=reasoning,
        finish=finish if isinstance(finish, str) else None,
        usage=usage if isinstance(usage, dict) else None,
    )


def _first_choice(choices: list[Any]) -> dict[str, Any]:
    """The choice of ``index`` 0 (an upstream may list its choices in any order), else the
    first listed; an empty object when there is none."""
    listed = [choice for choice in choices if isinstance(choice, dict)]
    for choice in listed:
        index = choice.get("index")
        if type(index) is int and index == 0:
            return choice
    return listed[0] if listed else {}
