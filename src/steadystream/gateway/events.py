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
    classify_chunk,
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
    "delivered_usage",
]

KEEPALIVE = encode_comment("keepalive")
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


class EventCutter:
    """Cuts one upstream body into events; one per attempt.

    The half event a read leaves is kept in a growing ``bytearray`` and joined once, when
    the event completes: a large event in many small reads costs linear time, not a copy of
    everything so far on every read. An event larger than ``max_event_bytes`` fails the
    stream (:attr:`Cause.OVERSIZED_EVENT`): no real chunk comes near it, and holding it
    would let one upstream take the gateway's memory.
    """

    __slots__ = ("_carry", "_decoder", "_whole", "envelope", "keep_raw", "max_event_bytes")

    def __init__(self, *, keep_raw: bool = True, max_event_bytes: int = 1 << 20) -> None:
        self._decoder = SseDecoder()
        # The last read took the fast path: the decoder is at a boundary, as it was told
        # (skipped_events), and nothing reached it since: no need to ask it again.
        self._whole = False
        self._carry = bytearray()
        self.envelope: dict[str, Any] | None = None
        # Each piece's own bytes (and its payload) are needed only to re-send pieces one by
        # one (a pacer, a fallback's rewriter); a plain relay forwards the read's bytes whole.
        self.keep_raw = keep_raw
        self.max_event_bytes = max_event_bytes

    @property
    def pending_bytes(self) -> int:
        """Bytes of the unfinished event held until its end arrives."""
        return len(self._carry)

    def feed(self, data: bytes) -> ReadResult:
        """One read: the events it completed (stopping at ``[DONE]`` or a failure)."""
        if (
            data[-2:] == b"\n\n"
            and (self._whole or self._decoder.at_boundary)  # so nothing is carried over either
            and len(data) <= self.max_event_bytes
            and b"\r" not in data
        ):
            result = self._feed_whole(data)
            if result is not None:
                return result
        return self._feed(data)

    def _feed_whole(self, data: bytes) -> ReadResult | None:
        """The fast path: a read of whole single-line ``data:`` events; None: not that.

        What servers send, read by read, when the reads keep up: no SSE decoder, one JSON
        parse per event, and the common content chunk classified inline. Anything else (a
        comment, a named event, a line end other than LF, a payload that is not a chunk)
        returns None before any state changed, and the general path reads it; both give
        the same result (``tests/gateway/test_events.py``).
        """
        keep_raw = self.keep_raw
        pieces: list[Piece] = []
        offset = 0
        segments = data.split(b"\n\n")
        if segments.pop():  # "\n\n\n": a blank line more than the events' own
            return None
        for segment in segments:
            if segment[:5] != b"data:" or b"\n" in segment:
                return None
            end = offset + len(segment) + 2
            payload = segment[6:] if segment[5:6] == b" " else segment[5:]
            if payload[:1] != b"{":
                if payload != b"[DONE]" or end != len(data):
                    return None  # (bytes after [DONE]: the decoder must see them)
                pieces.append(Piece(None, "", data[offset:end], end - offset))
                self._skipped()
                return ReadResult(data[:end], pieces, None, True)
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return None
            piece = _content_piece(obj, data[offset:end] if keep_raw else b"", end - offset)
            if piece is None:
                try:
                    chunk = classify_chunk(obj, payload)
                except ProtocolError:
                    return None
                if chunk.kind is EventKind.ERROR:
                    return None
                usage = chunk.usage
                finish = chunk.finish_reason
                piece = Piece(
                    chunk.kind,
                    chunk.text,
                    data[offset:end] if keep_raw else b"",
                    end - offset,
                    usage.get("completion_tokens", -1) if usage is not None else -1,
                    finish,
                    payload.decode() if keep_raw else "",
                    usage,
                    () if finish is None else _finished_of(obj),
                )
            elif keep_raw:
                piece = piece._replace(payload=payload.decode())
            if self.envelope is None:
                self.envelope = {key: obj[key] for key in _ENVELOPE_KEYS if key in obj}
            pieces.append(piece)
            offset = end
        self._skipped()
        return ReadResult(data, pieces)

    def _skipped(self) -> None:
        if not self._whole:
            self._decoder.skipped_events()
            self._whole = True

    def _feed(self, data: bytes) -> ReadResult:
        """The general path: any SSE, split anywhere."""
        decoder = self._decoder
        self._whole = False
        items = decoder.feed(data)
        pending = decoder.undispatched_bytes
        if not items:
            self._carry += data
            if pending > self.max_event_bytes:
                return self._oversized(pending)
            return _EMPTY
        if self._carry:
            self._carry += data
            buf = bytes(self._carry)
        else:
            buf = data
        complete = len(buf) - pending
        self._carry = bytearray(buf[complete:]) if pending else bytearray()
        keep_raw = self.keep_raw
        limit = self.max_event_bytes
        pieces: list[Piece] = []
        offset = 0
        for item in items:
            end = offset + item.wire_bytes
            if item.wire_bytes > limit:
                return ReadResult(buf[:offset], pieces, self._too_large(item.wire_bytes))
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
                    buf[offset:end] if keep_raw else b"",
                    item.wire_bytes,
                    usage.get("completion_tokens", -1) if usage is not None else -1,
                    chunk.finish_reason,
                    payload if keep_raw else "",
                    usage,
                    () if chunk.finish_reason is None else _finished_choices(payload),
                )
            )
            offset = end
        if pending > limit:
            return ReadResult(buf[:offset], pieces, self._oversized(pending).failure)
        return ReadResult(buf[:complete] if offset == complete else buf[:offset], pieces)

    def _too_large(self, size: int) -> Failure:
        return Failure(
            Cause.OVERSIZED_EVENT,
            f"an upstream event of {size} bytes is larger than limits.max_event_bytes "
            f"({self.max_event_bytes})",
        )

    def _oversized(self, pending: int) -> ReadResult:
        # The half event stays (and shows in pending_bytes) until the attempt is dropped.
        return ReadResult(
            b"",
            [],
            Failure(
                Cause.OVERSIZED_EVENT,
                f"an upstream event grew past limits.max_event_bytes ({self.max_event_bytes} "
                f"bytes) without ending ({pending} bytes so far)",
            ),
        )

    def error_at_end(self) -> str:
        """Why a body that ended here is not a complete stream."""
        if self._decoder.in_event or self._carry:
            return "the upstream connection closed mid-event"
        return "the upstream stream ended without [DONE]"


def _content_piece(obj: Any, raw: bytes, wire: int) -> Piece | None:
    """The common chunk (one choice, its delta a non-empty content and at most a role) as a
    piece; None for any other shape, which :func:`classify_chunk` reads."""
    if type(obj) is not dict or obj.get("error") is not None or obj.get("usage") is not None:
        return None
    choices = obj.get("choices")
    if type(choices) is not list or len(choices) != 1 or obj.get("object") == "error":
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is dict:
        if len(delta) != 1 and not (len(delta) == 2 and "role" in delta):
            return None
        text = delta.get("content")
    elif delta is None:  # the completions shape
        text = choice.get("text")
    else:
        return None
    if type(text) is not str or not text:
        return None
    return Piece(_CONTENT, text, raw, wire)


def _finished_choices(payload: str) -> tuple[int, ...]:
    """The choices a chunk's finish reasons end (read again only for a finish: rare)."""
    return _finished_of(orjson.loads(payload))


def _finished_of(obj: dict[str, Any]) -> tuple[int, ...]:
    """The choices a parsed chunk's finish reasons end.

    With ``n > 1`` the answer is over once every choice ended, not after ``n`` finish
    reasons: an upstream may repeat one choice's, or end several choices in one chunk.
    """
    choices = obj.get("choices") or ()
    return tuple(
        index if type(index := choice.get("index", position)) is int else position
        for position, choice in enumerate(choices)
        if choice.get("finish_reason") is not None
    )


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
