"""Upstream events as the relay handles them: pieces, reads, failures, fallbacks' rewrites.

The event cutter (:class:`~steadystream.gateway.line.EventCutter`) takes reads as the socket
gave them and returns a :class:`ReadResult`: the bytes of the events they completed,
untouched, and a :class:`Piece` for each, saying what it is (for measurement, the watchdog
and failover). An unfinished event is held back until its end arrives, so the gateway can
always add its own event (a keepalive, an in-band error) at a clean boundary, and a failed
upstream's half event never reaches the client.

:class:`FallbackRewriter` is the slow path, used only for a fallback upstream after a
failover: its chunks are re-encoded to carry the first upstream's ``id``, ``created`` and
``model``, a second role chunk is dropped, and under ``regenerate`` the part that repeats
what the client already has is cut out.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import orjson

from steadystream._types import EventKind
from steadystream.gateway.failover import Cause, PrefixMatcher
from steadystream.protocol.openai import (
    chat_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
)
from steadystream.protocol.sse import DONE, encode_comment

__all__ = [
    "KEEPALIVE",
    "SHUTDOWN_MESSAGE",
    "SHUTDOWN_WRITE_S",
    "SSE_HEADERS",
    "ChunkFormat",
    "Failure",
    "FallbackRewriter",
    "Piece",
    "ReadResult",
    "Rewriter",
    "delivered_usage",
]

KEEPALIVE = encode_comment("keepalive")
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # (nginx: do not buffer this response)
]
"""The headers of every event stream the gateway answers (a relay's, a replay's)."""
SHUTDOWN_MESSAGE = (
    "the gateway shut down mid-stream (a restart or a scale-down); send the request again"
)
"""The in-band error of a stream still open when the server stops (code gateway_shutdown)."""
SHUTDOWN_WRITE_S = 1.0
"""How long that error may take to write (a client that reads nothing)."""
_ENVELOPE_KEYS = ("id", "created", "model")
_CONTENT = EventKind.CONTENT  # (an enum's member read per event costs a lookup through its class)


class Piece(NamedTuple):
    """One upstream event. ``kind`` None is the ``[DONE]`` marker (not a timeline event)."""

    kind: EventKind | None
    text: str
    raw: bytes  # the event's bytes as the client gets them (b"": not kept, see EventCutter)
    wire: int  # the bytes it took on the upstream wire
    usage: int = -1  # the running completion_tokens it carried, -1: none
    finish: str | None = None
    payload: str = ""  # the SSE data, for the slow paths that must re-read the chunk
    usage_counts: dict[str, Any] | None = None  # the chunk's usage object (slow paths only)
    finished: tuple[int, ...] = ()  # the indices of the choices its finish reasons end


class Failure(NamedTuple):
    cause: Cause
    message: str


class ReadResult(NamedTuple):
    data: bytes  # the bytes to forward: the pieces' raw bytes, in order
    pieces: list[Piece]
    failure: Failure | None = None
    done: bool = False


_EMPTY = ReadResult(b"", [])


def set_text(obj: dict[str, Any], kind: EventKind, text: str) -> None:
    """Replace the text of one kind in a chunk object (the first choice)."""
    choices = obj.get("choices")
    if not choices:
        return
    choice = choices[0]
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        choice["text"] = text
        return
    if kind is EventKind.REASONING:
        key = "reasoning_content" if "reasoning_content" in delta else "reasoning"
    else:
        key = "content"
    delta[key] = text


def delivered_usage(usage: dict[str, Any], committed: int) -> dict[str, Any]:
    """A continuation's usage as the client's answer: ``committed`` tokens came before it.

    The fallback counted only its own completion, and counted the committed text again as
    prompt (it was sent to it as an assistant prefix). What the client received is the
    committed tokens plus the fallback's; its own prompt is the fallback's less the
    committed tokens. What each upstream billed stays in ``meta.attempts[].usage``.
    """
    out = dict(usage)
    completion = usage.get("completion_tokens")
    prompt = usage.get("prompt_tokens")
    if isinstance(completion, int):
        out["completion_tokens"] = completion + committed
    if isinstance(prompt, int):
        out["prompt_tokens"] = max(0, prompt - committed)
    if isinstance(out.get("completion_tokens"), int) and isinstance(out.get("prompt_tokens"), int):
        out["total_tokens"] = out["completion_tokens"] + out["prompt_tokens"]
    return out


class Rewriter(Protocol):
    """What an attempt's events go through on their way to the client, one by one, when they
    cannot go as they came: a fallback's (:class:`FallbackRewriter`), or a translation into
    the client's API (gateway/translation)."""

    def rewrite(self, piece: Piece) -> Piece | None:
        """The piece to relay (its ``raw`` what the client gets; b"": nothing), None to drop
        it; check :attr:`failure` after a None."""

    @property
    def failure(self) -> Failure | None:
        """Why the stream cannot go on (set with the None that dropped a piece)."""


_DIVERGED = Failure(Cause.DIVERGED, "the regenerated answer diverged")


class FallbackRewriter:
    """Makes a fallback upstream's events fit the stream the client is already reading.

    Under ``continue`` (``usage_base`` > 0: tokens committed before it) its usage is
    rewritten to describe the whole answer the client received (:func:`delivered_usage`).
    """

    __slots__ = ("_envelope", "_matcher", "_role_sent", "_usage_base")

    def __init__(
        self,
        envelope: dict[str, Any] | None,
        *,
        role_sent: bool,
        matcher: PrefixMatcher | None,
        usage_base: int = 0,
    ) -> None:
        self._envelope = envelope or {}
        self._role_sent = role_sent
        self._matcher = matcher
        self._usage_base = usage_base

    @property
    def matcher(self) -> PrefixMatcher | None:
        return self._matcher

    def rewrite(self, piece: Piece) -> Piece | None:
        """The piece to relay, None to drop it; check :attr:`diverged` after a None."""
        kind = piece.kind
        matcher = self._matcher
        if kind is None:
            # [DONE]: a fallback that ends before repeating all the client has is shorter.
            if matcher is not None and not matcher.end():
                return None
            return piece
        if kind is EventKind.KEEPALIVE:
            return piece
        obj = orjson.loads(piece.payload)
        obj.update(self._envelope)
        choices = obj.get("choices") or []
        delta = choices[0].get("delta") if choices else None
        if isinstance(delta, dict) and self._role_sent:
            delta.pop("role", None)
        if kind is EventKind.ROLE:
            if self._role_sent:
                return None
            self._role_sent = True
        text = piece.text
        if matcher is not None:
            if kind.carries_text:
                emitted = matcher.feed(kind, text)
                if emitted is None:
                    return None
                if emitted != text:
                    set_text(obj, kind, emitted)
                    text = emitted
                    if not emitted:
                        kind = EventKind.EMPTY
            if piece.finish is not None and not matcher.end():
                return None
            if kind is EventKind.EMPTY and piece.finish is None and piece.usage < 0:
                return None
        counts = piece.usage_counts
        if counts is not None and self._usage_base:
            counts = obj["usage"] = delivered_usage(counts, self._usage_base)
        return piece._replace(kind=kind, text=text, raw=encode_chunk(obj), usage_counts=counts)

    @property
    def diverged(self) -> bool:
        return self._matcher is not None and self._matcher.diverged

    @property
    def failure(self) -> Failure | None:
        return _DIVERGED if self.diverged else None


class ChunkFormat:
    """The gateway's own events: paced pieces, in-band errors, keepalives, ``[DONE]``."""

    __slots__ = ("_chat", "_role_pending", "envelope")

    def __init__(self, *, chat: bool, envelope: dict[str, Any] | None = None) -> None:
        self._chat = chat
        self._role_pending = chat
        self.envelope = envelope

    def role_seen(self) -> None:
        self._role_pending = False

    def text(self, kind: EventKind, text: str) -> bytes:
        """A content (or reasoning) chunk carrying ``text``."""
        env = self.envelope or {}
        ident, model, created = env.get("id", ""), env.get("model", ""), env.get("created", 0)
        if not self._chat:
            return encode_chunk(completion_chunk(ident, model, created, text=text))
        role = "assistant" if self._role_pending else None
        self._role_pending = False
        if kind is EventKind.REASONING:
            return encode_chunk(chat_chunk(ident, model, created, role=role, reasoning=text))
        return encode_chunk(chat_chunk(ident, model, created, role=role, content=text))

    @staticmethod
    def without_text(piece: Piece) -> bytes:
        """A piece's chunk with its text emptied (to send a finish reason or usage alone)."""
        obj = orjson.loads(piece.payload)
        if piece.kind is not None:
            set_text(obj, piece.kind, "")
        return encode_chunk(obj)

    @staticmethod
    def error(message: str, code: str, route: str = "chat") -> bytes:
        """An in-band error event in the route's own shape (what its SDK raises on): chat's
        error chunk then ``[DONE]``; Messages' ``event: error``. (Responses' needs the
        response it ends: translation/responses.py, ``failed_after``.)"""
        if route == "messages":
            error = {
                "type": "error",
                "error": {"type": _ANTHROPIC_ERRORS.get(code, "api_error"), "message": message},
            }
            return encode_event(error, "error")
        return encode_chunk(error_payload(message, type="server_error", code=code)) + DONE

    @staticmethod
    def end(route: str = "chat") -> bytes:
        """The end of an answer whose upstream gave its finish and then fell silent."""
        if route == "messages":
            return encode_event({"type": "message_stop"}, "message_stop")
        return DONE


_ANTHROPIC_ERRORS = {
    "upstream_stall": "overloaded_error",
    "upstream_overloaded": "overloaded_error",
    "gateway_shutdown": "overloaded_error",  # (ask again: the SDK's retry takes this one)
}


def encode_event(obj: dict[str, Any], name: str) -> bytes:
    """One typed event (Responses, Messages): ``event: NAME`` and the object as its data."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"
