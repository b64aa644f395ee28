"""A server that says its answer is whole and then holds the body open (silence after a
finish): the client waits ``--finish-timeout`` past the last read, not the read timeout, then
closes it; the stream is whole, and ``meta.end_missing_ms`` says the end never came."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from steadystream import FakeClock, Outcome, SpecError
from steadystream._clock import NS_PER_S
from steadystream.bench import Endpoint
from steadystream.bench.client import StreamClient
from steadystream.bench.config import BenchConfig
from steadystream.bench.workload import RequestSpec
from steadystream.protocol import DONE, chat_chunk, encode_chunk
from tests.support.scripted import chunked, serving

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
_TEXT = encode_chunk(chat_chunk("c", "m", 1, content="whole answer"))
_FINISH = encode_chunk(chat_chunk("c", "m", 1, finish_reason="stop"))
_USAGE = encode_chunk(
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
)  # fmt: skip

Script = Callable[[asyncio.StreamWriter, asyncio.Event], Awaitable[None]]


@contextlib.asynccontextmanager
async def _server(script: Script) -> AsyncIterator[tuple[str, asyncio.Event]]:
    """Answers one request with ``script``; the event it is handed lets it go on."""
    go_on = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await script(writer, go_on)
        await reader.read()  # (until the client closes)

    async with serving(handle) as port:
        yield f"http://127.0.0.1:{port}/v1", go_on


def _client(url: str, clock: FakeClock) -> StreamClient:
    # (The read timeout runs on the loop's own clock: far away, it never fires here.)
    return StreamClient(Endpoint(url, "m"), clock, read_timeout_s=60.0, finish_timeout_s=5.0)


def _request() -> RequestSpec:
    return RequestSpec(0, ({"role": "user", "content": "hi"},), 8, 1)


async def _until(condition: Callable[[], bool]) -> None:
    """Let the loop run (real sockets) until ``condition`` holds; 5 s of real time at most."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


@pytest.mark.asyncio
async def test_silence_after_the_finish_is_closed_after_the_finish_timeout() -> None:
    async def finish_then_hold(writer: asyncio.StreamWriter, go_on: asyncio.Event) -> None:
        writer.write(_HEAD + chunked(_TEXT) + chunked(_FINISH))
        await writer.drain()
        await go_on.wait()

    clock = FakeClock(1_000 * NS_PER_S)
    async with _server(finish_then_hold) as (url, _):
        stream = asyncio.ensure_future(_client(url, clock).stream(_request(), "r1"))
        await _until(lambda: clock.next_deadline is not None)
        assert clock.next_deadline == 1_005 * NS_PER_S  # five seconds past the last read
        await clock.advance(5 * NS_PER_S - 1)
        await asyncio.sleep(0.05)
        assert not stream.done()
        await clock.advance(1)
        await _until(stream.done)
        timeline = stream.result().timeline
    assert timeline.outcome is Outcome.COMPLETE  # the answer was whole
    assert timeline.error is None
    assert timeline.meta["end_missing_ms"] == 5_000.0
    assert timeline.end_ns == 5 * NS_PER_S  # the body was held until the client closed it


@pytest.mark.asyncio
async def test_a_read_after_the_finish_waits_again_from_itself() -> None:
    # (With n > 1, other choices may still be streaming after one's finish; a usage chunk
    # follows the finish too.)
    async def finish_usage_then_hold(writer: asyncio.StreamWriter, go_on: asyncio.Event) -> None:
        writer.write(_HEAD + chunked(_TEXT) + chunked(_FINISH))
        await writer.drain()
        await go_on.wait()
        writer.write(chunked(_USAGE))
        await writer.drain()
        await asyncio.Event().wait()

    clock = FakeClock()
    async with _server(finish_usage_then_hold) as (url, go_on):
        stream = asyncio.ensure_future(_client(url, clock).stream(_request(), "r1"))
        await _until(lambda: clock.next_deadline is not None)
        await clock.advance(3 * NS_PER_S)
        go_on.set()
        await _until(lambda: clock.next_deadline == 8 * NS_PER_S)
        await clock.advance(5 * NS_PER_S - 1)
        await asyncio.sleep(0.05)
        assert not stream.done()
        await clock.advance(1)
        await _until(stream.done)
        timeline = stream.result().timeline
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.meta["end_missing_ms"] == 5_000.0
    assert timeline.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


@pytest.mark.asyncio
async def test_a_stream_that_ends_after_its_finish_is_not_marked() -> None:
    async def finish_then_done(writer: asyncio.StreamWriter, go_on: asyncio.Event) -> None:
        writer.write(_HEAD + chunked(_TEXT) + chunked(_FINISH))
        await writer.drain()
        await go_on.wait()
        writer.write(chunked(DONE) + b"0\r\n\r\n")
        await writer.drain()

    clock = FakeClock()
    async with _server(finish_then_done) as (url, go_on):
        stream = asyncio.ensure_future(_client(url, clock).stream(_request(), "r1"))
        await _until(lambda: clock.next_deadline is not None)
        await clock.advance(2 * NS_PER_S)
        go_on.set()
        await _until(stream.done)
        timeline = stream.result().timeline
        assert clock.next_deadline is None  # the wait ended with the stream
    assert timeline.outcome is Outcome.COMPLETE
    assert "end_missing_ms" not in timeline.meta


@pytest.mark.asyncio
async def test_silence_before_any_finish_is_the_read_timeouts() -> None:
    async def text_then_hold(writer: asyncio.StreamWriter, go_on: asyncio.Event) -> None:
        writer.write(_HEAD + chunked(_TEXT))
        await writer.drain()
        await go_on.wait()

    clock = FakeClock()
    async with _server(text_then_hold) as (url, _):
        # (1 s: the head and the text, sent at once, must come within it on a busy machine)
        client = StreamClient(Endpoint(url, "m"), clock, read_timeout_s=1.0, finish_timeout_s=5.0)
        stream = asyncio.ensure_future(client.stream(_request(), "r1"))
        await _until(stream.done)
        assert clock.next_deadline is None  # no finish: nothing waited on the finish timeout
        timeline = stream.result().timeline
    assert timeline.outcome is Outcome.TRUNCATED
    assert "end_missing_ms" not in timeline.meta


def test_the_option_is_a_positive_duration() -> None:
    assert BenchConfig(url="http://127.0.0.1:1/v1", model="m").finish_timeout == 5 * NS_PER_S
    assert BenchConfig(url="http://h/v1", model="m", finish_timeout="250ms").finish_timeout == (
        250_000_000
    )
    with pytest.raises(SpecError, match="--finish-timeout"):
        BenchConfig(url="http://h/v1", model="m", finish_timeout="0s")
