"""bench --disconnect against a server made by hand: a return that goes wrong in a way a
gateway seldom does (refused, cut short) is recorded as not resumed, never as a clean one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from steadystream import Outcome, Timeline
from steadystream.bench import RunOptions
from steadystream.bench.cancel import CancelPoint, CancelPolicy
from steadystream.bench.disconnect import DisconnectPolicy, reconnect_summary
from tests.support.bench import id_event, small_run
from tests.support.scripted import chunked

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"x-steadystream-stream-id: s1\r\n\r\n"
)


@asynccontextmanager
async def _server(
    *, cut_return: bool, close_after_first: bool, noid_return: bool = False
) -> AsyncIterator[str]:
    """Answers the POST with three events, slowly, naming stream ``s1``; the return (GET
    /v1/streams/s1) gets one event and then a body that ends without [DONE]."""
    server: asyncio.Server | None = None
    handlers: list[asyncio.Task[None]] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0]
        if line.startswith(b"POST"):
            if close_after_first and server is not None:
                server.close()  # the return finds nothing listening
            writer.write(_HEAD)
            for event_id in (1, 2, 3):
                writer.write(chunked(id_event(event_id, f"w{event_id} ")))
                await writer.drain()
                await asyncio.sleep(0.05)
        elif line.startswith(b"GET /v1/streams/s1") and cut_return:
            writer.write(_HEAD + chunked(id_event(4, "w4 ")) + b"0\r\n\r\n")
            await writer.drain()
        elif line.startswith(b"GET /v1/streams/s1") and noid_return:
            # Not a gateway's: the rest of the stream with no ids, and half of it missing.
            body = id_event(9, "w9 ").split(b"\n", 1)[1] + b"data: [DONE]\n\n"
            writer.write(_HEAD + chunked(body) + b"0\r\n\r\n")
            await writer.drain()
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        # (the client drops the first connection mid-answer: that is the point)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await answer(reader, writer)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await asyncio.gather(*handlers)  # each ends by itself within its three events


async def _dropped(base_url: str) -> Timeline:
    policy = DisconnectPolicy.parse("after=2tok,back=10ms")
    result = await small_run(
        base_url, requests=1, options=RunOptions(max_requests=1, disconnect=policy)
    )
    (timeline,) = result.timelines
    return timeline


async def test_a_return_cut_short_is_not_a_clean_reconnect() -> None:
    async with _server(cut_return=True, close_after_first=False) as url:
        timeline = await _dropped(url)
    assert timeline.outcome is Outcome.TRUNCATED
    (back,) = timeline.meta["reconnects"]
    assert back["status"] == 200
    assert back["first_ms"] is not None
    assert "after the return" in back["error"]
    assert "[DONE]" in back["error"]
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert summary.failed == 1


async def test_a_return_that_cannot_connect_says_why() -> None:
    async with _server(cut_return=False, close_after_first=True) as url:
        timeline = await _dropped(url)
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert back["first_ms"] is None
    assert back["status"] is None
    assert "connect" in back["error"]
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert summary.failed == 1


async def test_a_return_whose_events_carry_no_ids_cannot_be_judged_whole() -> None:
    async with _server(cut_return=False, close_after_first=False, noid_return=True) as url:
        timeline = await _dropped(url)
    (back,) = timeline.meta["reconnects"]
    assert back["first_ms"] is not None
    assert "carry no ids" in back["error"]
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert summary.failed == 1


async def test_a_drop_whose_return_the_runs_end_cuts_short_is_marked_so() -> None:
    policy = DisconnectPolicy.parse("after=2tok,back=60s")
    options = RunOptions(duration_ns=200_000_000, grace_ns=300_000_000, disconnect=policy)
    async with _server(cut_return=True, close_after_first=False) as url:
        result = await small_run(url, requests=1, concurrency=1, options=options)
    timeline = result.timelines[0]
    assert timeline.meta["disconnect"] == "after 2 tokens, back 60000ms"
    (back,) = timeline.meta["reconnects"]
    assert back["interrupted"] is True
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert (summary.reconnects, summary.failed, summary.interrupted) == (0, 0, 1)


async def test_a_stream_chosen_to_cancel_is_not_also_dropped() -> None:
    cancel = CancelPolicy(1.0, CancelPoint.parse("1tok"), seed=0)
    policy = DisconnectPolicy.parse("after=2tok,back=10ms")
    options = RunOptions(max_requests=1, cancel=cancel, disconnect=policy)
    async with _server(cut_return=True, close_after_first=False) as url:
        result = await small_run(url, requests=1, options=options)
    (timeline,) = result.timelines
    assert timeline.outcome is Outcome.CANCELLED
    assert "disconnect" not in timeline.meta
    assert "reconnects" not in timeline.meta
