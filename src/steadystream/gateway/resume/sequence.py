"""The Responses API's way back into a stream: ``starting_after``, a ``sequence_number``.

Every event the Responses API streams carries its ``sequence_number``; a reader who comes
back by ``GET /v1/responses/{id}?stream=true&starting_after=N`` gets the events numbered
above ``N`` (routes.py). The stream's kept events are its bytes as sent, so the numbers are
read from them: :func:`last_sequence` and :func:`events_after` on a chunk,
:func:`check_sequence` to refuse a number the stream never sent (as a ``Last-Event-ID`` past
its events is refused), and :func:`past_sequence` to read ahead, in a stream another
process keeps, to the number asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

from steadystream._clock import Clock
from steadystream.gateway.resume.log import StreamGone

__all__ = [
    "check_sequence",
    "events_after",
    "last_sequence",
    "last_sequence_of",
    "past_sequence",
]

_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')
_EVENT_END = re.compile(rb"id: \d+(?:\r\n|\r|\n)(?:\r\n|\r|\n)")


def _no_sequence(sequence: int) -> StreamGone:
    return StreamGone("unknown", f"the stream has sent no sequence_number {sequence}")


def check_sequence(last: int, after: int, sequence: int) -> None:
    """:class:`StreamGone` (unknown) when ``starting_after`` ``sequence`` is past ``last``,
    the ``sequence_number`` of the last event after event ``after`` (-1: none), as a
    ``Last-Event-ID`` past a stream's events is. With no event after ``after`` the reader's
    own ``Last-Event-ID`` says it read them all: it waits for more, or the end."""
    if last < sequence and (last >= 0 or after == 0):
        raise _no_sequence(sequence)


async def past_sequence(
    events: AsyncIterator[bytes | None],
    after: int,
    sequence: int,
    clock: Clock,
    wait_ns: int | None,
) -> AsyncIterator[bytes | None]:
    """The events after event ``after`` of a stream another process keeps, read now until
    one reaches ``sequence`` or the stream ends (:func:`check_sequence`), then to be sent as
    read. A running stream (``wait_ns`` not None) that has sent events after ``after`` but
    none that reaches ``sequence`` within ``wait_ns`` is :class:`StreamGone` (unknown), as a
    ``Last-Event-ID`` ahead of it is (redis_store's ``_caught_up``): waited for, the reader
    would hold the generation past its grace with nothing ever sent to it. With nothing
    after ``after`` yet, the reader's own ``Last-Event-ID`` says it read them all: it waits
    for more, or the end."""
    read: list[bytes | None] = []
    last = -1
    deadline = None if wait_ns is None else clock.now_ns() + wait_ns
    while True:
        pending = asyncio.ensure_future(anext(events))
        if deadline is not None and not pending.done():
            timer = asyncio.ensure_future(clock.sleep_until(deadline))
            try:
                await asyncio.wait({pending, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if not pending.done():  # (the deadline passed first)
                if last >= 0 or after == 0:
                    pending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await pending
                    raise _no_sequence(sequence)
                return _replayed(read, pending, events)
        try:
            chunk = await pending
        except StopAsyncIteration:  # (the end)
            check_sequence(last, after, sequence)
            return _replayed(read, None, events)
        read.append(chunk)
        if chunk:
            last = max(last, last_sequence(chunk))
            if last >= sequence:
                return _replayed(read, None, events)


async def _replayed(
    chunks: list[bytes | None],
    pending: asyncio.Future[bytes | None] | None,
    events: AsyncIterator[bytes | None],
) -> AsyncIterator[bytes | None]:
    """``chunks``, then what ``pending`` (a read of ``events`` under way) gives, then the rest
    of ``events``."""
    for chunk in chunks:
        yield chunk
    if pending is not None:
        try:
            yield await pending
        except StopAsyncIteration:
            return
    async for chunk in events:
        yield chunk


def last_sequence_of(events: list[bytes], after: int) -> int:
    """The ``sequence_number`` of the last of ``events[after:]`` that has one, or -1."""
    for at in range(len(events) - 1, after - 1, -1):
        found = last_sequence(events[at])
        if found >= 0:
            return found
    return -1


def last_sequence(chunk: bytes) -> int:
    """The ``sequence_number`` of the last event in ``chunk`` that has one, or -1."""
    at = chunk.rfind(b'"sequence_number"')
    found = None if at < 0 else _SEQUENCE.match(chunk, at)
    return -1 if found is None else int(found[1])


def events_after(chunk: bytes, sequence: int) -> bytes:
    """The events of ``chunk`` whose ``sequence_number`` is above ``sequence``."""
    kept: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(chunk):
        event = chunk[start : match.end()]
        start = match.end()
        found = _SEQUENCE.search(event)
        if found is None or int(found[1]) > sequence:
            kept.append(event)
    return b"".join(kept)
