"""Checks of translated streams: each event out validated against the official SDKs' types."""

from __future__ import annotations

from typing import Any

import anthropic.types
import openai.types.responses
import orjson
from pydantic import TypeAdapter

from steadystream.protocol import SseEvent, new_decoder

RESPONSES_EVENT: TypeAdapter[Any] = TypeAdapter(openai.types.responses.ResponseStreamEvent)
MESSAGES_EVENT: TypeAdapter[Any] = TypeAdapter(anthropic.types.RawMessageStreamEvent)
REQUEST = {"model": "m", "input": "hi", "instructions": "Be brief.", "max_output_tokens": 50}
"""A Responses request, for the chat body it becomes."""


def client_events(route: str, data: bytes) -> list[dict[str, Any]]:
    """The events of ``data`` in the client's API, each checked against its SDK's type."""
    events = []
    for item in new_decoder().feed(data):
        assert isinstance(item, SseEvent)
        obj = orjson.loads(item.data)
        assert item.event == obj["type"]
        adapter = RESPONSES_EVENT if route == "responses" else MESSAGES_EVENT
        assert adapter.validate_python(obj).type == obj["type"]
        events.append(obj)
    return events


def translate(
    route: str, reads: list[bytes], *, keep_raw: bool = False, max_text: int = 1 << 20
) -> list[dict[str, Any]]:
    """The client's events for ``reads``: chat bytes cut by the line's cutter, each piece
    through a translator, each event checked against its SDK's types. ``keep_raw``: the
    pieces carry their payloads (as the line keeps them for a translated attempt); without,
    each rewritten piece is of its piece's kind and text."""
    from steadystream.gateway.line import line_build
    from steadystream.gateway.translation import stream_translator

    translator = stream_translator(
        route, "r1", model="m", created=5, request=REQUEST, max_text=max_text
    )
    cutter = line_build().EventCutter(keep_raw=keep_raw)
    out = b""
    for data in reads:
        for piece in cutter.feed(data).pieces:
            rewritten = translator.rewrite(piece)
            assert rewritten is not None
            if not keep_raw:
                assert rewritten.kind is piece.kind
                assert rewritten.text == piece.text
            out += rewritten.raw
    return client_events(route, out)
