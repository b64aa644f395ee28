"""The express lane: reads written to the client from the read callback, in order, or not at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steadystream import EventKind
from steadystream._clock import FakeClock
from steadystream.gateway import GatewayServer
from steadystream.gateway import server as server_module
from steadystream.gateway.attempt import Attempt, express_lane, read_attempt
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import Failure, Piece
from steadystream.gateway.failover import Cause
from steadystream.gateway.later import AfterWrites
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import RawOutlet
from steadystream.lab import LabServer
from steadystream.protocol import DONE, chat_chunk, encode_chunk
from tests.gateway.conftest import (
    MemorySink,
    chat_body,
    gateway_config,
    keep_native_lanes,
    post,
    upstream,
)

MS = 1_000_000
EVENT = encode_chunk(chat_chunk("c", "m", 1, content="tok"))


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.unsent = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.closing


async def _never(message: Any) -> None:
    raise AssertionError("the lane went through the server's send")


def lane(
    *, chunks: bool = True, scrub: Any = None
) -> tuple[Any, Attempt, StreamContext, RawOutlet, FakeTransport]:
    clock = FakeClock()
    record = StreamRecord("r", 0, {})
    buffer: StreamBuffer[Out] = StreamBuffer(max_bytes=1 << 20, max_events=100)
    ctx = StreamContext(clock, record, buffer, StuckClient(10**9), scrub=scrub)
    transport = FakeTransport()
    outlet = RawOutlet(ctx, _never, transport, chunks=chunks)  # type: ignore[arg-type]
    config = UpstreamConfig(name="u", base_url="http://127.0.0.1:9/v1")
    attempt = Attempt(config, 0, "r", Watchdog(first_token_ns=10**9, stall_ns=10**9))
    attempt.watchdog.start(0)
    attempt.cutter.feed(encode_chunk(chat_chunk("c", "m", 1, role="assistant", content="")))
    return express_lane(ctx, attempt, outlet), attempt, ctx, outlet, transport


@pytest.mark.asyncio
async def test_a_read_while_the_reader_waits_goes_out_as_one_chunk_and_is_accounted_after() -> None:
    take, attempt, ctx, _, transport = lane()
    attempt.idle = True
    assert take(5 * MS, EVENT)
    assert transport.written == [b"%x\r\n%b\r\n" % (len(EVENT), EVENT)]
    assert attempt.early is None  # taken whole: the reader never sees it
    assert attempt.idle  # and still waits: the next read may go the same way
    up, down = ctx.record.upstream, ctx.record.downstream
    assert len(up) == 0  # the bookkeeping waits for the end of the loop's pass
    assert len(ctx.after_writes) == 1
    await asyncio.sleep(0)
    assert len(ctx.after_writes) == 0
    assert list(up.times) == [5 * MS]
    assert list(up.kinds) == list(down.kinds) == [EventKind.CONTENT]
    assert ctx.progress.content_text == "tok"  # what a failover would continue from
    assert attempt.watchdog.last_token_ns == 5 * MS
    assert take(6 * MS, EVENT)
    assert take(7 * MS, EVENT)
    ctx.after_writes.run()  # what the reader and the relay do before they read the records
    assert len(transport.written) == 3
    assert list(up.times) == [5 * MS, 6 * MS, 7 * MS]
    assert ctx.progress.content_text == "toktoktok"


@pytest.mark.asyncio
async def test_after_writes_runs_in_order_once_and_survives_a_failing_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    later = AfterWrites()
    ran: list[int] = []

    def fail() -> None:
        raise RuntimeError("boom")

    later.add(ran.append, 1)
    later.add(fail)
    later.add(ran.append, 2)
    later.run()
    assert ran == [1, 2]
    assert "bookkeeping after a write failed" in caplog.text
    later.add(ran.append, 3)
    await asyncio.sleep(0)  # the callback scheduled with the first call runs it
    assert ran == [1, 2, 3]
    await asyncio.sleep(0)  # and the one left from before finds nothing to do
    assert ran == [1, 2, 3]


@pytest.mark.parametrize("why", ["reader busy", "stopped", "buffer holds something"])
def test_the_lane_leaves_a_read_it_could_reorder_to_the_reader(why: str) -> None:
    take, attempt, ctx, _, transport = lane()
    attempt.idle = why != "reader busy"
    if why == "stopped":
        attempt.failure = Failure(Cause.STALL, "stopped by the watchdog")
    if why == "buffer holds something":
        piece = Piece(EventKind.KEEPALIVE, "", b":\n\n", 3)
        ctx.buffer.offer(Out(b":\n\n", [piece]), 3)
    assert not take(5, EVENT)
    assert transport.written == []
    assert attempt.early is None  # not even cut: the reader cuts it, in its turn
    assert attempt.cutter.pending_bytes == 0


@pytest.mark.asyncio
async def test_a_read_left_for_the_reader_is_not_overtaken_by_a_later_one() -> None:
    """Failed before: a declined read left the reader counted as waiting, so a second drain
    before the reader's step (the stall rescuer's and the loop's) sent the later read first."""
    take, attempt, ctx, _, transport = lane()
    attempt.idle = True
    keepalive = Piece(EventKind.KEEPALIVE, "", b":\n\n", 3)
    ctx.buffer.offer(Out(b":\n\n", [keepalive]), 3)  # a keepalive waits for the writer
    first = encode_chunk(chat_chunk("c", "m", 1, content="A"))
    second = encode_chunk(chat_chunk("c", "m", 1, content="B"))
    assert not take(1, first)  # declined: queued for the reader
    assert not attempt.idle
    await ctx.buffer.get()  # the writer sends the keepalive
    assert not take(2, second)
    assert transport.written == []
    assert attempt.cutter.pending_bytes == 0  # neither was cut: the reader cuts both, in order


@pytest.mark.asyncio
async def test_the_end_the_lane_sent_is_accounted_for_even_if_the_reader_is_stopped() -> None:
    """Failed before: the lane wrote the last tokens and [DONE], and the guard stopped the
    reader before it ran; the records, the watchdog and the failover progress missed text
    the client had."""
    take, attempt, ctx, outlet, transport = lane()
    final = (
        encode_chunk(chat_chunk("c", "m", 1, content=" world"))
        + encode_chunk(chat_chunk("c", "m", 1, finish_reason="stop"))
        + DONE
    )
    waiter: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()

    async def read() -> tuple[int, bytes]:
        return await waiter

    attempt.body = read
    task = asyncio.ensure_future(read_attempt(ctx, attempt, outlet))
    await asyncio.sleep(0)
    assert attempt.idle
    assert not take(7 * MS, final)  # written; the reader ends the attempt on it
    waiter.set_result((7 * MS, final))
    task.cancel()  # the guard's step came first
    await asyncio.gather(task, return_exceptions=True)
    ctx.after_writes.run()  # as the relay does when the reader stops
    assert b" world" in b"".join(transport.written)
    assert ctx.answered
    assert ctx.progress.content_text == " world"
    assert attempt.watchdog.finished
    assert len(ctx.record.downstream) == len(ctx.record.upstream) == 2


@pytest.mark.asyncio
async def test_the_half_event_a_read_left_is_counted_as_of_that_read() -> None:
    take, attempt, ctx, _, _ = lane()
    attempt.idle = True
    half = EVENT[:40]
    assert take(1, EVENT + half)  # sent whole; the half event waits for its end
    assert take(2, EVENT[40:] + EVENT)  # the next read, in the same pass, ends it
    ctx.after_writes.run()
    assert ctx.buffer.peak_bytes == len(half)  # held between the two reads


@pytest.mark.parametrize("why", ["unsent bytes", "closing", "sending", "no chunks"])
def test_a_read_the_client_cannot_take_now_is_cut_but_sent_by_the_reader(why: str) -> None:
    take, attempt, _, outlet, transport = lane(chunks=why != "no chunks")
    attempt.idle = True
    transport.unsent = 10 if why == "unsent bytes" else 0
    transport.closing = why == "closing"
    outlet.busy = why == "sending"
    assert not take(5, EVENT)
    assert transport.written == []
    early = attempt.early
    assert early is not None
    assert early.sent_ns is None
    assert early.result.data == EVENT


@pytest.mark.asyncio
async def test_what_the_lane_writes_is_scrubbed() -> None:
    take, attempt, _, _, transport = lane(scrub=lambda data: data.replace(b"tok", b"***"))
    attempt.idle = True
    take(5, EVENT)
    assert b"tok" not in transport.written[0]
    assert b"***" in transport.written[0]


@pytest.mark.asyncio
async def test_the_answer_is_whole_once_the_lane_wrote_done() -> None:
    take, attempt, ctx, _, transport = lane()
    attempt.idle = True
    assert take(5, EVENT)
    assert not ctx.answered
    assert not take(6, DONE)  # the reader ends the attempt on it
    assert transport.written[-1] == b"%x\r\n%b\r\n" % (len(DONE), DONE)
    assert ctx.answered
    early = attempt.early
    assert early is not None
    assert early.sent_ns is not None
    assert early.result.done


def test_a_failed_read_is_not_written() -> None:
    take, attempt, _, _, transport = lane()
    attempt.idle = True
    assert not take(5, b"data: {not json\n\n")
    assert transport.written == []
    early = attempt.early
    assert early is not None
    assert early.result.failure is not None
    assert early.sent_ns is None


def test_only_uvicorns_own_chunked_send_takes_frames() -> None:
    async def wrapped(message: Any) -> None: ...

    assert not server_module._writes_chunks({"type": "http"}, wrapped)


@pytest.mark.integration
def test_streams_go_out_through_the_lane_whole_and_recorded(
    monkeypatch: pytest.MonkeyPatch, sink: MemorySink
) -> None:
    written: list[int | None] = []
    original = RawOutlet.write_now

    def counting(self: RawOutlet, data: bytes) -> int | None:
        written.append(sent := original(self, data))
        return sent

    monkeypatch.setattr(RawOutlet, "write_now", counting)
    lanes = keep_native_lanes(monkeypatch)
    with (
        LabServer("steady", seed=4) as lab,
        GatewayServer(gateway_config(upstream(lab, "lab")), recorder=sink) as gateway,
    ):
        streams = [
            post(gateway.base_url, "/chat/completions", chat_body(12), {"X-Request-Id": f"x{i}"})
            for i in range(3)
        ]
        edges = [sink.edges(f"x{i}") for i in range(3)]
    sent = [t for t in written if t is not None]
    # Most reads went out from the read callback: the Python lane's or the native one's.
    assert len(sent) + sum(lane.pieces_taken for lane in lanes) >= 3 * 12 // 2
    for streamed, (up, down) in zip(streams, edges, strict=True):
        assert streamed.status == 200
        assert streamed.done
        assert streamed.error is None
        assert len(streamed.text) > 0
        assert len(up.times) == len(down.times)
        assert (down.times >= up.times).all()
        assert list(down.kinds) == list(up.kinds)
