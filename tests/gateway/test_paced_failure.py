"""The paced writer never ends a stream silently: a fault of its own mid-stream is said in
the stream, recorded, and what the relay hands over after it is let go."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from steadystream._clock import FakeClock
from steadystream._types import EventKind, Outcome
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import Piece
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.writers import write_paced
from steadystream.shaping import Passthrough


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.asyncio
async def test_a_chunk_the_pacer_cannot_take_apart_ends_the_stream_with_an_error() -> None:
    record = StreamRecord("r-paced", 0, {})
    buffer: StreamBuffer[Out] = StreamBuffer(max_bytes=1 << 20, max_events=100)
    ctx = StreamContext(FakeClock(0), record, buffer, StuckClient(10**9))
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    text = Piece(EventKind.CONTENT, "a", b'data: {"a":1}\n\n', 15)
    # Its text then its finish: the finish goes out alone, re-encoded from the payload,
    # which is nested deeper than any JSON reader takes.
    broken = Piece(EventKind.CONTENT, "b", b"data: x\n\n", 9, finish="stop", payload=_nested(2000))
    writer = asyncio.ensure_future(
        write_paced(ctx, send, Passthrough(), chat=True, high_watermark=50, low_watermark=20)
    )
    await buffer.put(Out(text.raw, [text]), 15)
    await buffer.put(Out(broken.raw, [broken]), 9)
    await buffer.put(Out(b"data: [DONE]\n\n", [Piece(None, "", b"", 0)]), 14)  # let go
    buffer.close()
    await asyncio.wait_for(writer, 5)
    bodies = [m["body"] for m in sent]
    assert bodies[0].startswith(b"data: ")  # the text before the fault went out
    error = orjson.loads(bodies[-1].split(b"\n\n")[0].removeprefix(b"data: "))
    assert error["error"]["code"] == "internal"
    assert bodies[-1].endswith(b"data: [DONE]\n\n")
    assert record.outcome is Outcome.ERROR
    assert "the gateway failed" in (record.error or "")
    assert EventKind.ERROR in record.downstream.kinds
    assert ctx.answered
