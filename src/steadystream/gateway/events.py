"""Upstream bytes as events: cut at event boundaries, classified, rewritten for a fallback.

:class:`EventCutter` takes reads as the socket gave them and returns the bytes of the events
they completed, untouched, with what each event is (for measurement, the watchdog and
failover). Relaying costs one SSE decode and one chunk parse per event; the bytes go out as
they came. An unfinished event is held back until its end arrives, so the gateway can always
add its own event (a keepalive, an in-band error) at a clean boundary, and a failed
upstream's half event never reaches the client.

:class:`FallbackRewriter` is the slow path, used only for a fallback upstream after a
failover: its chunks are re-encoded to carry the first upstream's ``id``, ``created`` and
``model``, a second role chunk is dropped, and under ``regenerate`` the part that repeats
what the client already has is cut out.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from steadystream._exceptions import ProtocolError
from steadystream._types import EventKind
from steadystream.gateway.failover import Cause, PrefixMatcher
from steadystream.protocol.openai import (
    chat_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
    is_done,
    parse_chunk,
)
from steadystream.protocol.sse import DONE, SseComment, SseDecoder, encode_comment

__all__ = [
    "KEEPALIVE",
    "ChunkFormat",
    "EventCutter",
    "Failure",
    "FallbackRewriter",
    "Piece",
    "ReadResult",
]

KEEPALIVE = encode_comment("keepalive")
_ENVELOPE_KEYS = ("id", "created", "model")


class Piece(NamedTuple):
    """One upstream event. ``kind`` None is the ``[DONE]`` marker (not a timeline event)."""

    kind: EventKind | None
    text: str
    raw: bytes  # the event's bytes as the client gets them (b"": not kept, see EventCutter)
    wire: int  # the bytes it took on the upstream wire
    usage: int = -1  # the running completion_tokens it carried, -1: none
    finish: str | None = None
    payload: str = ""  # the SSE data, for the slow paths that must re-read the chunk


class Failure(NamedTuple):
    cause: Cause
    message: str


class ReadResult(NamedTuple):
    data: bytes  # the bytes to forward: the pieces' raw bytes, in order
    pieces: list[Piece]
    failure: Failure | None = None
    done: bool = False


_EMPTY = ReadResult(b"", [])


class EventCutter:
    """Cuts one upstream body into events; one per attempt."""

    __slots__ = ("_carry", "_decoder", "envelope", "keep_raw")

    def __init__(self, *, keep_raw: bool = True) -> None:
        self._decoder = SseDecoder()
        self._carry = b""
        self.envelope: dict[str, Any] | None = None
        # Each piece's own bytes are needed only to re-send pieces one by one (a pacer, a
        # fallback's rewriter); a plain relay forwards the read's bytes whole.
        self.keep_raw = keep_raw

    def feed(self, data: bytes) -> ReadResult:
        """One read: the events it completed (stopping at ``[DONE]`` or a failure)."""
        buf = self._carry + data if self._carry else data
        items = self._decoder.feed(data)
        pending = self._decoder.undispatched_bytes
        complete = len(buf) - pending
        self._carry = buf[complete:] if pending else b""
        if not items:
            return _EMPTY
        pieces: list[Piece] = []
        offset = 0
        for item in items:
            end = offset + item.wire_bytes
            if isinstance(item, SseComment):
                pieces.append(Piece(EventKind.KEEPALIVE, "", buf[offset:end], item.wire_bytes))
                offset = end
                continue
            payload = item.data
            if item.event == "message":
                if not payload:
                    pieces.append(Piece(EventKind.KEEPALIVE, "", buf[offset:end], item.wire_bytes))
                    offset = end
                    continue
                if payload[0] != "{" and is_done(payload):
                    pieces.append(Piece(None, "", buf[offset:end], item.wire_bytes))
                    return ReadResult(buf[:end], pieces, None, True)
            elif item.event != "error":  # a named event the chunk protocol has no use for
                pieces.append(Piece(EventKind.KEEPALIVE, "", buf[offset:end], item.wire_bytes))
                offset = end
                continue
            try:
                chunk = parse_chunk(payload, event=item.event)
            except ProtocolError as exc:
                return ReadResult(buf[:offset], pieces, Failure(Cause.BAD_PAYLOAD, str(exc)))
            if chunk.kind is EventKind.ERROR:
                message = chunk.error or "error event with no message"
                return ReadResult(buf[:offset], pieces, Failure(Cause.UPSTREAM_ERROR, message))
            if self.envelope is None:
                self.envelope = _envelope(payload)
            usage = chunk.usage
            pieces.append(
                Piece(
                    chunk.kind,
                    chunk.text,
                    buf[offset:end] if self.keep_raw else b"",
                    item.wire_bytes,
                    usage.get("completion_tokens", -1) if usage is not None else -1,
                    chunk.finish_reason,
                    payload,
                )
            )
            offset = end
        return ReadResult(buf[:complete] if offset == complete else buf[:offset], pieces)

    def error_at_end(self) -> str:
        """Why a body that ended here is not a complete stream."""
        if self._decoder.in_event or self._carry:
            return "the upstream connection closed mid-event"
        return "the upstream stream ended without [DONE]"


def _envelope(payload: str) -> dict[str, Any]:
    obj = orjson.loads(payload)
    return {key: obj[key] for key in _ENVELOPE_KEYS if key in obj}


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


class FallbackRewriter:
    """Makes a fallback upstream's events fit the stream the client is already reading."""

    __slots__ = ("_envelope", "_matcher", "_role_sent")

    def __init__(
        self,
        envelope: dict[str, Any] | None,
        *,
        role_sent: bool,
        matcher: PrefixMatcher | None,
    ) -> None:
        self._envelope = envelope or {}
        self._role_sent = role_sent
        self._matcher = matcher

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
        return piece._replace(kind=kind, text=text, raw=encode_chunk(obj))

    @property
    def diverged(self) -> bool:
        return self._matcher is not None and self._matcher.diverged


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
    def error(message: str, code: str) -> bytes:
        """An OpenAI-style in-band error event (what the SDKs raise on), then ``[DONE]``."""
        return encode_chunk(error_payload(message, type="server_error", code=code)) + DONE
