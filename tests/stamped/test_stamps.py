"""Kernel stamps on a real loopback socket: exact gaps while the reader is blocked."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

import pytest

from steadystream._clock import NS_PER_MS, MonotonicClock
from steadystream.protocol import SseDecoder, SseEvent
from steadystream.stamped import StampedConnection, StampMode, Target
from tests.support.scripted import SSE_HEAD, Script, ScriptedServer, chunked

# Exact to a millisecond: a loaded machine defers loopback delivery (make test runs it alone).
pytestmark = pytest.mark.serial

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


async def blocked_reader(server: ScriptedServer, mode: StampMode) -> list[int]:
    clock = MonotonicClock()
    conn = await StampedConnection.open(Target.from_url(server.url), clock, mode)
    try:
        await conn.send("POST", {"Content-Type": "application/json"}, b"{}")
        await conn.head()
        # The event loop (the reader) is blocked while the events arrive: for BLOCK_S, and
        # until the sender wrote them all (a busy machine may run it late).
        blocked_until = time.monotonic() + BLOCK_S
        deadline = blocked_until + 10
        while time.monotonic() < blocked_until or len(server.write_ns) < EVENTS:
            assert time.monotonic() < deadline, "the sender did not write its events"
            time.sleep(0.005)
        decoder = SseDecoder()
        stamps: list[int] = []

        def sink(stamp: int, data: bytes) -> bool:
            stamps.extend(stamp for item in decoder.feed(data) if isinstance(item, SseEvent))
            return False

        await conn.stream_body(sink)
        return stamps
    finally:
        conn.close()


def run_blocked(serve: object, mode: StampMode) -> tuple[list[int], list[tuple[int, int]]]:
    box: list[ScriptedServer] = []
    server = serve(five_events(box))  # type: ignore[operator]
    box.append(server)
    stamps = asyncio.run(blocked_reader(server, mode))
    return stamps, server.write_ns


def matches_the_writes(stamps: list[int], writes: list[tuple[int, int]]) -> bool:
    """Each stamp inside its send call's window, each gap what the send windows allow (±1 ms)."""
    within = all(
        before - NS_PER_MS <= stamp <= after + NS_PER_MS
        for stamp, (before, after) in zip(stamps, writes, strict=True)
    )
    gaps = all(
        w1[0] - w0[1] - NS_PER_MS <= s1 - s0 <= w1[1] - w0[0] + NS_PER_MS
        for (s0, s1), (w0, w1) in zip(
            itertools.pairwise(stamps), itertools.pairwise(writes), strict=True
        )
    )
    return within and gaps


def test_kernel_stamps_keep_each_gap_while_the_reader_is_blocked(serve: object) -> None:
    stamps, writes = run_blocked(serve, StampMode.KERNEL)
    assert len(stamps) == EVENTS
    for (_, after), (before, _) in itertools.pairwise(writes):  # the sender slept 20 ms
        assert before - after >= (SPACING_S * 1000 - 1) * NS_PER_MS
    # Though the reader was blocked 200 ms while all five arrived, each stamp is its write,
    # and each recorded gap the sender's 20 ms (±1 ms beyond what its send windows allow).
    assert matches_the_writes(stamps, writes), [
        (s - w[0]) / NS_PER_MS for s, w in zip(stamps, writes, strict=True)
    ]


def test_user_stamps_lose_the_gaps_while_the_reader_is_blocked(serve: object) -> None:
    stamps, writes = run_blocked(serve, StampMode.USER)
    assert len(stamps) == EVENTS
    # The same check fails with user stamps: the events were read together after the block.
    assert not matches_the_writes(stamps, writes)
    assert stamps[-1] - stamps[0] < 5 * NS_PER_MS  # five events 80 ms apart read as a burst
