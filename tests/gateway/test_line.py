"""A stream's line: each upstream read cut, recorded at both edges, written, in order, at once."""

from __future__ import annotations

from typing import Any

import pytest

from steadystream import EventKind
from steadystream._uvicorn import client_link
from steadystream.gateway import GatewayServer
from steadystream.gateway.context import Out
from steadystream.gateway.events import Piece
from steadystream.gateway.failover import Cause
from steadystream.gateway.writers import RawOutlet
from steadystream.lab import LabServer
from steadystream.protocol import DONE, chat_chunk, encode_chunk
from tests.support.gateway import MemorySink, chat_body, gateway_config, post, upstream
from tests.support.line import Rig

MS = 1_000_000
EVENT = encode_chunk(chat_chunk("c", "m", 1, content="tok"))


def framed(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def test_a_read_goes_out_as_one_chunk_and_is_on_both_edges_at_once(build: str) -> None:
    rig = Rig(now=6 * MS)  # (the clock reads when the write is done)
    compiled = type(rig.line).__module__.endswith("_c")
    assert compiled is (build == "compiled")  # the build under test is the one that reads
    assert not rig.line.feed(5 * MS, EVENT + EVENT)
    assert rig.transport.written == [framed(EVENT + EVENT)]
    assert list(rig.up.times)[-2:] == [5 * MS, 5 * MS]
    assert list(rig.down.times)[-2:] == [6 * MS, 6 * MS]  # when the write was done
    assert list(rig.up.kinds)[-1] == list(rig.down.kinds)[-1] == EventKind.CONTENT
    assert rig.ctx.progress.content_text == "toktok"  # what a failover continues from
    assert rig.attempt.watchdog.last_token_ns == 5 * MS
    assert len(rig.ctx.buffer) == 0


@pytest.mark.parametrize("why", ["unsent bytes", "closing", "sending", "no chunks"])
def test_a_read_the_client_cannot_take_now_waits_in_the_buffer(why: str) -> None:
    rig = Rig(chunks=why != "no chunks")
    rig.transport.unsent = 10 if why == "unsent bytes" else 0
    rig.transport.closing = why == "closing"
    rig.outlet.busy = why == "sending"
    waiting = len(rig.ctx.buffer)  # (without chunks, the role chunk waits there too)
    sent = len(rig.down)
    assert not rig.line.feed(5 * MS, EVENT)
    assert rig.transport.written == []
    assert len(rig.ctx.buffer) == waiting + 1
    assert list(rig.up.times)[-1] == 5 * MS  # arrived, recorded at once
    assert len(rig.down) == sent  # not sent yet: the writer records it when it is


@pytest.mark.asyncio
async def test_a_later_read_never_overtakes_one_that_waits() -> None:
    rig = Rig()
    keepalive = Piece(EventKind.KEEPALIVE, "", b":\n\n", 3)
    rig.ctx.buffer.offer(Out(b":\n\n", [keepalive]), 3)  # waits for the writer
    first = encode_chunk(chat_chunk("c", "m", 1, content="A"))
    second = encode_chunk(chat_chunk("c", "m", 1, content="B"))
    rig.line.feed(1, first)
    assert rig.transport.written == []  # behind the keepalive
    await rig.ctx.buffer.get()  # the writer took the keepalive; "A" still waits
    rig.line.feed(2, second)
    assert rig.transport.written == []
    assert [out.data for out, _, _ in rig.ctx.buffer._items] == [first, second]


@pytest.mark.asyncio
async def test_a_full_buffer_pauses_the_reads_and_the_watchdog_until_the_writer_makes_room() -> (
    None
):
    rig = Rig(max_events=2)
    rig.transport.unsent = 1  # the client is behind
    watchdog = rig.attempt.watchdog
    rig.line.feed(1 * MS, EVENT)
    assert rig.conn.calls == []
    rig.line.feed(2 * MS, EVENT)  # the buffer is at its bound
    assert rig.conn.calls == ["pause"]
    assert watchdog.deadline() is None  # the client's wait does not count against upstream
    await rig.clock.advance(50 * MS)
    await rig.ctx.buffer.get()
    assert rig.conn.calls == ["pause", "resume"]
    assert watchdog.deadline() == 2 * MS + 10**9 + rig.clock.now_ns() - 2 * MS


def test_what_the_line_writes_is_scrubbed() -> None:
    rig = Rig(scrub=lambda data: data.replace(b"tok", b"***"))
    rig.line.feed(5, EVENT)
    assert b"tok" not in rig.transport.written[0]
    assert b"***" in rig.transport.written[0]


def test_done_ends_the_attempt_and_the_answer_is_whole_once_written() -> None:
    rig = Rig()
    assert not rig.line.feed(5, EVENT)
    assert not rig.ctx.answered
    final = encode_chunk(chat_chunk("c", "m", 1, finish_reason="stop")) + DONE
    assert rig.line.feed(6, final)  # over: read no more
    assert rig.transport.written[-1] == framed(final)
    assert rig.ctx.answered
    assert rig.attempt.ended
    assert rig.attempt.end_failure is None
    assert rig.attempt.watchdog.deadline() is None
    assert rig.line.feed(7, EVENT)  # anything after the end is not taken
    assert len(rig.transport.written) == 2


def test_a_failed_read_ends_the_attempt_and_its_bad_event_is_not_written() -> None:
    rig = Rig()
    assert rig.line.feed(5, EVENT + b"data: {not json\n\n")
    assert rig.transport.written == [framed(EVENT)]  # what came before it went out
    failure = rig.attempt.end_failure
    assert failure is not None
    assert failure.cause is Cause.BAD_PAYLOAD


def test_the_half_event_a_read_left_is_counted_as_of_that_read() -> None:
    rig = Rig()
    half = EVENT[:40]
    rig.line.feed(1, EVENT + half)  # sent whole; the half event waits for its end
    rig.line.feed(2, EVENT[40:] + EVENT)
    assert rig.ctx.buffer.peak_bytes == len(half)  # held between the two reads
    assert b"".join(rig.transport.written) == framed(EVENT) + framed(EVENT + EVENT)


def test_only_uvicorns_own_chunked_send_takes_frames() -> None:
    async def wrapped(message: Any) -> None: ...

    link = client_link(None)({"type": "http"}, wrapped)  # type: ignore[arg-type]
    assert not link.frames


@pytest.mark.integration
def test_streams_go_out_from_the_read_callback_whole_and_recorded(
    monkeypatch: pytest.MonkeyPatch, sink: MemorySink
) -> None:
    written: list[bool] = []
    original = RawOutlet.try_write

    def counting(self: RawOutlet, out: Out) -> bool:
        written.append(took := original(self, out))
        return took

    monkeypatch.setattr(RawOutlet, "try_write", counting)
    with (
        LabServer("steady", seed=4) as lab,
        GatewayServer(gateway_config(upstream(lab, "lab")), recorder=sink) as gateway,
    ):
        streams = [
            post(gateway.base_url, "/chat/completions", chat_body(12), {"X-Request-Id": f"x{i}"})
            for i in range(3)
        ]
        edges = [sink.edges(f"x{i}") for i in range(3)]
    assert sum(written) >= 3 * 12 // 2  # most reads went out from the read callback
    for streamed, (up, down) in zip(streams, edges, strict=True):
        assert streamed.status == 200
        assert streamed.done
        assert streamed.error is None
        assert len(streamed.text) > 0
        assert len(up.times) == len(down.times)
        assert (down.times >= up.times).all()
        assert list(down.kinds) == list(up.kinds)
