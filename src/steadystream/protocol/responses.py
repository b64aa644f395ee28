"""The Responses dialect: OpenAI Responses API streams (``POST /v1/responses``).

Every event is ``event: <type>`` with a JSON object whose ``type`` names it again and whose
``sequence_number`` counts from 0. What each is to the timeline:

- ``response.output_text.delta`` and ``response.refusal.delta``: visible text (``CONTENT``);
- ``response.reasoning_text.delta``, ``response.reasoning_summary_text.delta``: ``REASONING``;
- ``response.function_call_arguments.delta`` (and the custom-tool and MCP argument deltas):
  ``TOOL_CALL``;
- ``response.created``: the answer began (``ROLE``: not a token, as chat's role chunk);
- ``response.completed`` and ``response.incomplete``: the end of the answer (kind None), with
  the usage the final response carries (the only place this API puts it) and why it ended
  (``incomplete_details.reason``; ``max_output_tokens`` is chat's ``length``);
- ``error`` and ``response.failed``: the upstream's in-band error;
- every other event (the output item and content part lifecycle, ``.done`` events, in
  progress, annotations): structural, ``KEEPALIVE``: recorded, never a token.

There is no ``[DONE]``. The event's ``type`` in its data is what counts: a server that leaves
out the ``event:`` line is read the same, and an ``event:`` line that names another type than
the data does is a protocol error. Usage is given in the chat dialect's names
(``prompt_tokens``, ``completion_tokens``, ``total_tokens``, and ``reasoning_tokens``), so
that everything after the seam reads one shape.
"""

from __future__ import annotations

from typing import Any

from steadystream._exceptions import ProtocolError
from steadystream._types import EventKind
from steadystream.protocol._typed import KEEPALIVE, in_band_error, typed_event
from steadystream.protocol.chunks import _json_type, is_count
from steadystream.protocol.dialect import Decoded
from steadystream.protocol.sse_items import SseItem

__all__ = ["RESPONSES_TEXT_EVENTS", "ResponsesDialect", "responses_usage"]

RESPONSES_TEXT_EVENTS: dict[str, EventKind] = {
    "response.output_text.delta": EventKind.CONTENT,
    "response.refusal.delta": EventKind.CONTENT,
    "response.reasoning_text.delta": EventKind.REASONING,
    "response.reasoning_summary_text.delta": EventKind.REASONING,
    "response.function_call_arguments.delta": EventKind.TOOL_CALL,
    "response.custom_tool_call_input.delta": EventKind.TOOL_CALL,
    "response.mcp_call_arguments.delta": EventKind.TOOL_CALL,
}
"""The events that carry text a reader sees, by type, and what kind of text each is."""

_KEEPALIVE = KEEPALIVE
_STARTED = Decoded(EventKind.ROLE)
_ENDS = {"response.completed", "response.incomplete"}
MAX_SEQUENCE = 2**53
"""Sequence numbers at or past this are not taken (JSON's exact integers end here)."""
_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


class ResponsesDialect:
    """Decodes the events of one Responses stream (see the module docstring)."""

    # What a whole stream ends with, as a truncated one's error names it.
    END = "response.completed (or response.incomplete)"

    __slots__ = ("_envelope", "_sequence")

    def __init__(self) -> None:
        self._envelope: dict[str, Any] | None = None
        self._sequence = -1

    @property
    def envelope(self) -> dict[str, Any] | None:
        """The response's ``id``, ``created_at`` and ``model``, from ``response.created``."""
        return self._envelope

    @property
    def last_sequence_number(self) -> int:
        """The highest ``sequence_number`` read so far (-1: none)."""
        return self._sequence

    def decode(self, item: SseItem) -> Decoded:
        read = typed_event(item, "Responses")
        if isinstance(read, Decoded):
            return read
        kind, obj = read
        decoded = self._decode(kind, obj)
        # Taken once the event is known good (a bad one never reaches the client), and only
        # within what JSON numbers hold exactly: the gateway numbers its own events on from it.
        # Not an error's: the upstream's error is not relayed (the gateway sends its own, next
        # in line after what the client has, with no gap).
        sequence = obj.get("sequence_number")
        if (
            type(sequence) is int
            and self._sequence < sequence < MAX_SEQUENCE
            and decoded.kind is not EventKind.ERROR
        ):
            self._sequence = sequence
        return decoded

    def _decode(self, kind: str, obj: dict[str, Any]) -> Decoded:
        text_kind = RESPONSES_TEXT_EVENTS.get(kind)
        if text_kind is not None:
            delta = obj.get("delta")
            if not isinstance(delta, str):
                raise ProtocolError(f"{kind}: delta is {_json_type(delta)}, expected a string")
            return Decoded(text_kind, delta)
        if kind in _ENDS:
            return _end(obj, kind)
        if kind == "error":
            return in_band_error(obj)
        if kind == "response.failed":
            response = obj.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            if isinstance(error, dict) and error.get("message"):
                return in_band_error(error)
            # (A failure that says nothing more: its code, if any, and what it was.)
            code = error.get("code") if isinstance(error, dict) else None
            return in_band_error(
                {"code": code, "message": "the response failed (response.failed, no message)"}
            )
        if kind == "response.created":
            response = obj.get("response")
            if self._envelope is None and isinstance(response, dict):
                self._envelope = {
                    key: response[key] for key in ("id", "created_at", "model") if key in response
                }
            return _STARTED
        return _KEEPALIVE


def responses_usage(usage: Any) -> dict[str, int] | None:
    """A Responses ``usage`` object in the chat dialect's names (None: none given)."""
    if not isinstance(usage, dict):
        return None
    counts: dict[str, int] = {}
    for ours, theirs in (
        ("prompt_tokens", "input_tokens"),
        ("completion_tokens", "output_tokens"),
        ("total_tokens", "total_tokens"),
    ):
        value = usage.get(theirs)
        if is_count(value):
            counts[ours] = value
    details = usage.get("output_tokens_details")
    if isinstance(details, dict) and is_count(details.get("reasoning_tokens")):
        counts["reasoning_tokens"] = details["reasoning_tokens"]
    return counts or None


def _end(obj: dict[str, Any], kind: str) -> Decoded:
    response = obj.get("response")
    if not isinstance(response, dict):
        raise ProtocolError(f"{kind}: response is {_json_type(response)}, expected an object")
    usage = responses_usage(response.get("usage"))
    finish = "stop"
    if kind == "response.incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        finish = _REASONS.get(reason, reason) if isinstance(reason, str) else "incomplete"
    completion = usage.get("completion_tokens", -1) if usage is not None else -1
    return Decoded(None, "", completion, finish, usage)
