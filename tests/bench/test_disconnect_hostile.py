"""bench --disconnect against a hostile resume server: whatever it names or answers, a stream
is recorded with a clear error and truthful counts, never a traceback, a hang or a record
that holds what the server made up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from steadystream import Outcome, Timeline
from steadystream._clock import MonotonicClock
from steadystream.bench import Endpoint
from steadystream.bench.client import StreamClient
from steadystream.bench.disconnect import DisconnectPolicy, EventIds, reconnect_summary
from steadystream.bench.workload import RequestSpec
from steadystream.protocol import SseEvent
from tests.support.bench import id_event
from tests.support.scripted import chunked, serving

pytestmark = pytest.mark.integration

Writer = asyncio.StreamWriter
Answer = Callable[[Writer], Awaitable[None]]


def _head(stream_id: bytes | None = b"s1", status: bytes = b"200 OK") -> bytes:
    named = b"" if stream_id is None else b"x-steadystream-stream-id: %s\r\n" % stream_id
    return (
        b"HTTP/1.1 %s\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n%s\r\n"
        % (status, named)
    )


_DONE = chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _post(ids: tuple[bytes, ...] = (b"1", b"2", b"3"), stream_id: bytes = b"s1") -> Answer:
    """The POST's answer: its events one at a time, naming ``stream_id``; the client leaves
    after the second, and nothing after the last is sent."""

    async def answer(writer: Writer) -> None:
        writer.write(_head(stream_id))
        for index, event_id in enumerate(ids):
            writer.write(chunked(id_event(event_id, f"w{index} ")))
            await writer.drain()
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # (the client has left by then)

    return answer


async def _rest(writer: Writer) -> None:
    """A gateway's return: the event after the last one seen, and the end."""
    writer.write(_head() + chunked(id_event(b"3", "w2 ")) + _DONE)
    await writer.drain()


@asynccontextmanager
async def _server(post: Answer, get: Answer) -> AsyncIterator[tuple[str, list[bytes]]]:
    """Answers the POST with ``post`` and any other request with ``get``; yields the base URL
    and the heads of the requests after the POST."""
    returns: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: Writer) -> None:
        # (the client drops the first connection mid-answer, and may leave any other)
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"POST"):
            await post(writer)
        else:
            returns.append(head)
            await get(writer)

    async with serving(handle) as port:
        yield f"http://127.0.0.1:{port}/v1", returns


async def _dropped(
    url: str, *, max_tokens: int = 20, read_timeout_s: float = 5.0, spec: str = ""
) -> Timeline:
    """One stream that drops after two tokens and comes straight back."""
    client = StreamClient(Endpoint(url, "lab"), MonotonicClock(), read_timeout_s=read_timeout_s)
    plan = DisconnectPolicy.parse(spec or "after=2tok,back=0ms").plan
    request = RequestSpec(0, ({"role": "user", "content": "hi"},), max_tokens, 1)
    sent = await asyncio.wait_for(client.stream(request, "r1", disconnect=plan), 20)
    return sent.timeline


def _failed(timeline: Timeline) -> int:
    summary = reconnect_summary([timeline])
    assert summary is not None
    return summary.failed


@pytest.mark.asyncio
async def test_a_return_that_replays_one_event_without_end_is_cut_not_a_traceback() -> None:
    async def again_and_again(writer: Writer) -> None:
        writer.write(_head())
        for _ in range(5_000):
            writer.write(chunked(id_event(b"3", "w2 ")))
            await writer.drain()
        await asyncio.sleep(5)

    async with _server(_post(), again_and_again) as (url, _):
        timeline = await _dropped(url, max_tokens=5)
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert "more than 1,020 events" in back["error"]
    assert back["doubled"] == back["events_after"] - 1  # (its first was the one after)
    assert back["lost"] == 0
    assert _failed(timeline) == 1


@pytest.mark.parametrize(
    ("last_id", "words"),
    [
        ("\u20ac2".encode(), "characters a header cannot carry"),
        (b"2\x01\x7f", "characters a header cannot carry"),
        (b"7" * 5_000, "5,000 characters long"),
    ],
)
@pytest.mark.asyncio
async def test_a_last_event_id_no_header_can_carry_is_not_sent(last_id: bytes, words: str) -> None:
    async with _server(_post((b"1", last_id)), _rest) as (url, returns):
        timeline = await _dropped(url)
    assert returns == []  # (nothing to ask with: no request was made)
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert words in back["error"]
    assert "Last-Event-ID" in back["error"]
    assert len(back["last_event_id"]) <= 1024  # (the record holds no made-up megabytes)
    assert _failed(timeline) == 1


@pytest.mark.parametrize(
    ("stream_id", "words"), [(b"", "named no stream"), (b"a" * 5_000, "5,000 characters")]
)
@pytest.mark.asyncio
async def test_a_stream_named_with_no_name_or_a_huge_one_is_not_asked_for(
    stream_id: bytes, words: str
) -> None:
    async with _server(_post(stream_id=stream_id), _rest) as (url, returns):
        timeline = await _dropped(url)
    assert returns == []
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert words in back["error"]


@pytest.mark.asyncio
async def test_a_path_in_the_stream_name_stays_in_its_segment() -> None:
    name = b"../admin?x=1#f"

    async def rest(writer: Writer) -> None:
        writer.write(_head(name) + chunked(id_event(b"3", "w2 ")) + _DONE)
        await writer.drain()

    async with _server(_post(stream_id=name), rest) as (url, returns):
        timeline = await _dropped(url)
    assert timeline.outcome is Outcome.COMPLETE
    (head,) = returns
    assert head.startswith(b"GET /v1/streams/..%2Fadmin%3Fx%3D1%23f HTTP/1.1\r\n")


@pytest.mark.asyncio
async def test_a_redirect_is_not_taken_for_the_stream() -> None:
    async def redirect(writer: Writer) -> None:
        # (a body of events, such as the rest of the stream: still no answer to follow)
        body = chunked(id_event(b"3", "w2 ")) + _DONE
        writer.write(_head(status=b"302 Found").replace(b"\r\n\r\n", b"\r\nlocation: /x\r\n\r\n"))
        writer.write(body)
        await writer.drain()

    async with _server(_post(), redirect) as (url, _):
        timeline = await _dropped(url)
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert back["status"] == 302
    assert back["events_after"] == 0
    assert "redirect" in back["error"]
    assert _failed(timeline) == 1


@pytest.mark.asyncio
async def test_an_answer_with_another_streams_events_is_not_counted_as_losses() -> None:
    async def another(writer: Writer) -> None:
        events = b"".join(id_event(b"%d" % n, "o ") for n in range(100, 103))
        writer.write(_head(b"s2") + chunked(events) + _DONE)
        await writer.drain()

    async with _server(_post(), another) as (url, _):
        timeline = await _dropped(url)
    assert timeline.outcome is Outcome.ERROR
    (back,) = timeline.meta["reconnects"]
    assert "another stream" in back["error"]
    assert (back["lost"], back["events_after"]) == (0, 0)
    assert _failed(timeline) == 1


@pytest.mark.asyncio
async def test_ids_that_come_back_out_of_order_are_counted_for_what_they_are() -> None:
    async def backwards(writer: Writer) -> None:
        events = b"".join(id_event(b"%d" % n, f"b{n} ") for n in range(6, 0, -1))
        writer.write(_head() + chunked(events) + _DONE)
        await writer.drain()

    async with _server(_post(), backwards) as (url, _):
        timeline = await _dropped(url)
    (back,) = timeline.meta["reconnects"]
    # 6, then 5, 4 and 3 late (none lost), then 2 and 1 again; and [DONE].
    assert (back["events_after"], back["lost"], back["doubled"]) == (7, 0, 2)


def test_an_id_a_jump_skipped_that_comes_late_is_neither_lost_nor_doubled() -> None:
    ids = EventIds()
    ids.see([SseEvent(f"d{n}", id=str(n)) for n in (1, 3, 10, 3, 2, 5, 9, 6)])
    assert (ids.lost, ids.doubled) == (3, 1)  # 4, 7 and 8 never came; 3 came twice
    ids.see([SseEvent(f"d{n}", id=str(n)) for n in (4, 7, 8, 8)])
    assert (ids.lost, ids.doubled) == (0, 2)


def test_digits_of_other_scripts_are_no_sequence_number() -> None:
    ids = EventIds()
    ids.see([SseEvent("a", id="1"), SseEvent("b", id="\u0663")])  # (Arabic-Indic 3)
    assert (ids.lost, ids.doubled, ids.numbered) == (0, 0, False)


@pytest.mark.asyncio
async def test_a_return_that_never_answers_is_bounded_by_the_read_timeout() -> None:
    async def silent(writer: Writer) -> None:
        await asyncio.sleep(30)

    async with _server(_post(), silent) as (url, _):
        # (1 s: the POST's events, 20 ms apart, are read under the same timeout)
        timeline = await _dropped(url, read_timeout_s=1.0)
    (back,) = timeline.meta["reconnects"]
    assert back["status"] is None
    assert "timed out" in back["error"]
    assert _failed(timeline) == 1
