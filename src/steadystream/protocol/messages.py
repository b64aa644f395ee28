"""The Messages dialect: Anthropic Messages API streams (``POST /v1/messages``).

Every event is ``event: <type>`` with a JSON object whose ``type`` names it again. What each
is to the timeline:

- ``content_block_delta`` by its delta's type: ``text_delta`` is visible text (``CONTENT``),
  ``thinking_delta`` is ``REASONING``, ``input_json_delta`` (a tool's arguments) is
  ``TOOL_CALL``; ``signature_delta`` and ``citations_delta`` are structural;
- ``message_start``: the answer began (``ROLE``: not a token, as chat's role chunk); its
  usage holds the input tokens;
- ``message_delta``: the stop reason and the cumulative output usage (``EMPTY``, as chat's
  finish chunk; ``max_tokens`` is chat's ``length``, ``end_turn`` and ``stop_sequence`` its
  ``stop``, ``tool_use`` its ``tool_calls``);
- ``message_stop``: the end of the answer (kind None);
- ``error`` (``overloaded_error`` mid-stream, ...): the upstream's in-band error;
- ``ping``, ``content_block_start``, ``content_block_stop`` and any event this reader does
  not know: structural, ``KEEPALIVE``: recorded, never a token.

The event's ``type`` in its data is what counts; an ``event:`` line that names another type
than the data does is a protocol error. Usage is given in the chat dialect's names
(``prompt_tokens`` counts cache reads and writes too), so everything after the seam reads
one shape.
"""

from __future__ import annotations

from typing import Any

from steadystream._exceptions import ProtocolError
from steadystream._types import EventKind
from steadystream.protocol._typed import KEEPALIVE, in_band_error, typed_event
from steadystream.protocol.chunks import _json_type, is_count
from steadystream.protocol.dialect import Decoded
from steadystream.protocol.sse_items import SseItem

__all__ = ["MESSAGES_DELTAS", "MessagesDialect", "messages_usage"]

MESSAGES_DELTAS: dict[str, tuple[EventKind, str]] = {
    "text_delta": (EventKind.CONTENT, "text"),
    "thinking_delta": (EventKind.REASONING, "thinking"),
    "input_json_delta": (EventKind.TOOL_CALL, "partial_json"),
}
"""The deltas that carry text a reader sees: their kind, and the field holding the text."""

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Messages' stop reasons in chat's finish reasons (others are kept as they are)."""

_KEEPALIVE = KEEPALIVE
_STARTED = Decoded(EventKind.ROLE)
_END = Decoded(None)
_INPUT_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class MessagesDialect:
    """Decodes the events of one Messages stream (see the module docstring)."""

    # What a whole stream ends with, as a truncated one's error names it.
    END = "message_stop"

    __slots__ = ("_envelope", "_input")

    def __init__(self) -> None:
        self._envelope: dict[str, Any] | None = None
        self._input: dict[str, int] = {}  # message_start's input counts

    @property
    def envelope(self) -> dict[str, Any] | None:
        """The message's ``id`` and ``model``, from ``message_start``."""
        return self._envelope

    def decode(self, item: SseItem) -> Decoded:
        read = typed_event(item, "Messages")
        if isinstance(read, Decoded):
            return read
        kind, obj = read
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                raise ProtocolError(
                    f"content_block_delta: delta is {_json_type(delta)}, expected an object"
                )
            named = delta.get("type")
            shape = MESSAGES_DELTAS.get(named) if isinstance(named, str) else None
            if shape is None:
                return _KEEPALIVE  # a signature, citations: structural
            text_kind, field = shape
            text = delta.get(field)
            if not isinstance(text, str):
                raise ProtocolError(
                    f"{delta['type']}: {field} is {_json_type(text)}, expected a string"
                )
            return Decoded(text_kind, text)
        if kind == "ping":
            return _KEEPALIVE
        if kind == "message_delta":
            return self._delta(obj)
        if kind == "message_stop":
            return _END
        if kind == "error":
            return in_band_error(obj)
        if kind == "message_start":
            return self._start(obj)
        return _KEEPALIVE

    def _start(self, obj: dict[str, Any]) -> Decoded:
        message = obj.get("message")
        if not isinstance(message, dict):
            raise ProtocolError(
                f"message_start: message is {_json_type(message)}, expected an object"
            )
        if self._envelope is None:
            self._envelope = {key: message[key] for key in ("id", "model") if key in message}
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._input = {k: v for k in _INPUT_KEYS if is_count(v := usage.get(k))}
        return _STARTED

    def _delta(self, obj: dict[str, Any]) -> Decoded:
        delta = obj.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        finish = STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None
        usage = messages_usage(obj.get("usage"), self._input)
        completion = usage.get("completion_tokens", -1) if usage is not None else -1
        return Decoded(EventKind.EMPTY, "", completion, finish, usage)


def messages_usage(usage: Any, started: dict[str, int] | None = None) -> dict[str, int] | None:
    """A Messages ``usage`` object in the chat dialect's names; ``started``: the input counts
    ``message_start`` gave, for a ``message_delta`` that leaves them out (None: none given)."""
    if not isinstance(usage, dict):
        return None
    given = dict(started or {})
    given.update({k: v for k in _INPUT_KEYS if is_count(v := usage.get(k))})
    counts: dict[str, int] = {}
    if given:
        counts["prompt_tokens"] = sum(given.values())
    output = usage.get("output_tokens")
    if is_count(output):
        counts["completion_tokens"] = output
    if "prompt_tokens" in counts and "completion_tokens" in counts:
        counts["total_tokens"] = counts["prompt_tokens"] + counts["completion_tokens"]
    return counts or None
