"""What the typed-event dialects share (Responses, Messages): each event's data is a JSON
object whose ``type`` names it, as its ``event:`` line does."""

from __future__ import annotations

from typing import Any

import orjson

from steadystream._exceptions import ProtocolError
from steadystream._scrubbing import one_line
from steadystream._types import EventKind
from steadystream.protocol.chunks import _json_type, _preview
from steadystream.protocol.dialect import Decoded
from steadystream.protocol.sse_items import SseComment, SseItem

__all__ = ["KEEPALIVE", "MAX_MESSAGE_CHARS", "in_band_error", "typed_event"]

KEEPALIVE = Decoded(EventKind.KEEPALIVE)
MAX_MESSAGE_CHARS = 2_000
"""The most of an upstream's error message that is recorded and relayed."""


def typed_event(item: SseItem, api: str) -> tuple[str, dict[str, Any]] | Decoded:
    """``(type, data)`` of an event, or what it is when that is all there is to it: a
    comment or an empty event is a keepalive, an ``event: error`` without a type an error.

    The data's ``type`` is what counts (a server that leaves out ``event:`` lines is read the
    same); an ``event:`` line that names another type is a :class:`ProtocolError`, as is data
    that is not a JSON object.
    """
    if isinstance(item, SseComment) or not item.data:
        return KEEPALIVE
    payload = item.data
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        if item.event == "error":
            return in_band_error({"message": payload.strip()})
        raise ProtocolError(f"{api} event is not valid JSON: {exc}: {_preview(payload)}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"{api} event must be a JSON object, got {_json_type(obj)}")
    kind = obj.get("type")
    if not isinstance(kind, str):
        if item.event == "error":
            return in_band_error(obj)
        raise ProtocolError(f"{api} event has no type: {_preview(payload)}")
    if item.event not in ("message", kind):
        raise ProtocolError(f"{api} event {item.event!r} carries data of type {kind!r}")
    return kind, obj


def in_band_error(obj: dict[str, Any]) -> Decoded:
    """An upstream's in-band error as one line, ``code: message`` (``overloaded_error:
    Overloaded``); an ``error`` object inside ``obj`` is read in its place."""
    error = obj.get("error")
    if not isinstance(error, dict):
        error = obj
    message = error.get("message")
    code = error.get("code") or error.get("type")
    text = message if isinstance(message, str) and message else "error event with no message"
    if isinstance(code, str) and code and code != "error":
        text = f"{code}: {text}"
    return Decoded(EventKind.ERROR, error=one_line(text[:MAX_MESSAGE_CHARS]))
