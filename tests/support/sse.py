"""Encoded streams and ways to cut them into reads: OpenAI chat bodies as SSE bytes, split
anywhere, and decoded by the SSE decoder of the build under test."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from steadystream.protocol import (
    DONE,
    SseComment,
    SseDecoder,
    SseItem,
    chat_chunk,
    encode_chunk,
    new_decoder,
    usage_chunk,
)

CHAT = "chat.completion.chunk"


def cut(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``body`` split at the given offsets (any order, duplicates allowed) into reads."""
    points = sorted({c for c in cuts if 0 < c < len(body)})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in pairwise(edges)]


def decode_reads(reads: Sequence[bytes]) -> tuple[list[SseItem], SseDecoder]:
    decoder = new_decoder()  # the build under test's (tests/conftest.py ``build``)
    items: list[SseItem] = []
    for read in reads:
        items.extend(decoder.feed(read))
    items.extend(decoder.close())
    return items, decoder


def chat_body(
    pieces: Sequence[str],
    *,
    role_first: bool = True,
    finish: str | None = "stop",
    usage_total: int | None = None,
    running_usage: Sequence[int] | None = None,
    done: bytes = DONE,
) -> bytes:
    """An OpenAI chat stream: role opener, one chunk per piece, finish, usage, [DONE].

    ``running_usage`` gives each content chunk a cumulative ``completion_tokens`` (vLLM's
    continuous usage); ``usage_total`` adds the usage-only tail.
    """
    out = []
    if role_first:
        out.append(encode_chunk(chat_chunk("c1", "m", 1, role="assistant", content="")))
    for i, piece in enumerate(pieces):
        usage = None
        if running_usage is not None:
            usage = {"prompt_tokens": 5, "completion_tokens": running_usage[i]}
        out.append(encode_chunk(chat_chunk("c1", "m", 1, content=piece, usage=usage)))
    if finish is not None:
        out.append(encode_chunk(chat_chunk("c1", "m", 1, content="", finish_reason=finish)))
    if usage_total is not None:
        tail = usage_chunk(
            "c1", "m", 1, object_name=CHAT, prompt_tokens=5, completion_tokens=usage_total
        )
        out.append(encode_chunk(tail))
    out.append(done)
    return b"".join(out)


def comments(items: Sequence[SseItem]) -> list[str]:
    return [i.text for i in items if isinstance(i, SseComment)]
