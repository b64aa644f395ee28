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
