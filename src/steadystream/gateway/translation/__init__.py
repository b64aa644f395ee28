"""A Responses or Messages client served by an upstream that speaks only chat completions.

An upstream speaks whatever API its client used unless its ``dialects`` say otherwise
(:func:`upstream_api`). For a Responses or Messages request and an upstream whose dialects
leave the request's API out but list chat, the gateway translates::

    client request ──► chat_request ──────────────────► upstream /chat/completions
    client ◄── typed events ◄── a StreamTranslator ◄─── chat pieces, on the line, one by one
    client ◄── Response / Message ◄── whole_answer ◄─── a chat completion (not streamed)

The stream is read in chat (the upstream's dialect), so the watchdog, usage, failover and both
edges' records work as for any chat stream; the translator is the attempt's rewriter on the
line and turns each piece into the client's events as it arrives, holding nothing back.

Translated: text (a chat refusal among it), reasoning (a Responses reasoning item, a
Messages thinking block), the finish reason, usage. Not translated (a 400 naming the
field): tools, images and files, stored conversations; a tool call an upstream makes anyway
is measured but not sent on.
"""

from __future__ import annotations

from typing import Any

import orjson

from steadystream.gateway.translation.bodies import chat_request
from steadystream.gateway.translation.chat import StreamTranslator, read_answer
from steadystream.gateway.translation.messages import MessagesTranslator, whole_message
from steadystream.gateway.translation.responses import ResponsesTranslator, whole_response
from steadystream.gateway.translation.routing import TRANSLATED, able_upstreams, upstream_api

__all__ = [
    "TRANSLATED",
    "MessagesTranslator",
    "ResponsesTranslator",
    "StreamTranslator",
    "able_upstreams",
    "chat_request",
    "stream_translator",
    "upstream_api",
    "whole_answer",
]


def stream_translator(
    route: str,
    ident: str,
    *,
    model: str,
    created: int,
    request: dict[str, Any],
    max_text: int,
) -> StreamTranslator:
    """The translator of one chat stream for a ``route`` client. ``ident``: the request's
    id (the answer's ids are made from it); ``model``: as the client named it; ``created``:
    Unix seconds; ``request``: the client's body (settings the answer repeats);
    ``max_text``: the most text held to repeat at the end (Responses)."""
    if route == "responses":
        return ResponsesTranslator(
            ident, model=model, created=created, request=request, max_text=max_text
        )
    if route == "messages":
        return MessagesTranslator(ident, model=model)
    raise ValueError(f"no translation of chat into {route!r}")


def whole_answer(
    route: str, body: bytes, ident: str, *, model: str, created: int, request: dict[str, Any]
) -> bytes:
    """A whole chat completion as the ``route`` client's answer; raises
    :class:`~steadystream.ProtocolError` when ``body`` is not a chat completion."""
    answer = read_answer(body)
    if route == "responses":
        data = whole_response(answer, ident, model=model, created=created, request=request)
    elif route == "messages":
        data = whole_message(answer, ident, model=model)
    else:
        raise ValueError(f"no translation of chat into {route!r}")
    return orjson.dumps(data)
