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
from steadystream.gateway.events import Failure, Piece

__all__ = ["ChatAnswer", "StreamTranslator", "comment_only", "count", "read_answer"]


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


def count(usage: dict[str, Any] | None, name: str, details: str = "") -> int | None:
    """One count of a chat usage object, or of its ``details`` object (None: not given). A
    stream's usage keeps the counts only, a detail's among them flat: looked for there too."""
    found: Any = usage
    for key in (details, name) if details else (name,):
        found = found.get(key) if isinstance(found, dict) else None
    if found is None and details and isinstance(usage, dict):
        found = usage.get(name)
    return found if type(found) is int else None


class ChatAnswer(NamedTuple):
    """What a whole chat completion answered (its first choice)."""

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
    choices = data["choices"]
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    text = message.get("content")
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    finish = choice.get("finish_reason")
    usage = data.get("usage")
    return ChatAnswer(
        text=text if isinstance(text, str) else "",
        reasoning=reasoning if isinstance(reasoning, str) else "",
        finish=finish if isinstance(finish, str) else None,
        usage=usage if isinstance(usage, dict) else None,
    )
