"""Kernel stamps on a real loopback socket: exact gaps while the reader is blocked."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

from steadystream._clock import NS_PER_MS, MonotonicClock
from steadystream.protocol import SseDecoder, SseEvent
from steadystream.stamped import StampedConnection, StampMode, Target

from .conftest import SSE_HEAD, Script, ScriptedServer, chunked

EVENTS = 5
SPACING_S = 0.020
BLOCK_S = 0.200


def five_events(server_box: list[ScriptedServer]) -> Script:
    def script(peer: socket.socket) -> None:
        peer.sendall(SSE_HEAD)
        time.sleep(0.02)  # the reader has the head and blocks its loop before the events
        for i in range(EVENTS):
            server_box[0].timed_write(peer, chunked(b'data: {"i": %d}\n\n' % i))
            time.sleep(SPACING_S)
        peer.sendall(b"0\r\n\r\n")

    return script


async def blocked_reader(url: str, mode: StampMode) -> list[int]:
    clock = MonotonicClock()
    conn = await StampedConnection.open(Target.from_url(url), clock, mode)
    try:
        await conn.send("POST", {"Content-Type": "application/json"}, b"{}")
        await conn.head()
        time.sleep(BLOCK_S)  # the event loop (the reader) is blocked while the events arrive
        decoder = SseDecoder()
        stamps: list[int] = []

        def sink(stamp: int, data: bytes) -> bool:
            stamps.extend(stamp for item in decoder.feed(data) if isinstance(item, SseEvent))
            return False

        await conn.stream_body(sink)
        return stamps
    finally:
        conn.close()


def run_blocked(serve: object, mode: StampMode) -> tuple[list[int], list[int]]:
    box: list[ScriptedServer] = []
    server = serve(five_events(box))  # type: ignore[operator]
    box.append(server)
    stamps = asyncio.run(blocked_reader(server.url, mode))
    return stamps, server.write_ns


def test_kernel_stamps_keep_each_gap_while_the_reader_is_blocked(serve: object) -> None:
    stamps, writes = run_blocked(serve, StampMode.KERNEL)
    assert len(stamps) == EVENTS
    gaps_ms = [(b - a) / NS_PER_MS for a, b in itertools.pairwise(stamps)]
    true_ms = [(b - a) / NS_PER_MS for a, b in itertools.pairwise(writes)]
    # The sender is a thread of this process: on a busy machine its sleeps run long, so the
    # true gaps are what it wrote (20 ms or more), and those are what must be recorded.
    assert all(gap >= SPACING_S * 1000 - 1.0 for gap in true_ms), true_ms
    # Each recorded gap is the sender's gap: 20 ms (±1 ms), not the moment the reader woke.
    pairs = list(zip(gaps_ms, true_ms, strict=True))
    assert all(abs(ours - theirs) <= 1.0 for ours, theirs in pairs), pairs
    # And each stamp is the write, not the read: within a millisecond of the sender's clock.
    late = [(s - w) / NS_PER_MS for s, w in zip(stamps, writes, strict=True)]
    assert all(abs(ms) <= 1.0 for ms in late), late


def test_user_stamps_lose_the_gaps_while_the_reader_is_blocked(serve: object) -> None:
    stamps, _ = run_blocked(serve, StampMode.USER)
    assert len(stamps) == EVENTS
    gaps_ms = [(b - a) / NS_PER_MS for a, b in itertools.pairwise(stamps)]
    # The same test the kernel stamps pass fails here: the events were read together.
    assert not all(abs(gap - SPACING_S * 1000) <= 1.0 for gap in gaps_ms), gaps_ms
