"""The bench client over a stamped connection: meta.stamps, and events that shared a stamp."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import pytest

from steadystream._clock import MonotonicClock
from steadystream.bench.client import StreamClient
from steadystream.bench.endpoint import Endpoint
from steadystream.bench.workload import RequestSpec
from steadystream.protocol import DONE, chat_chunk, encode_chunk
from steadystream.stamped import StallRescuer, StampMode
from tests.support.scripted import SSE_HEAD, ScriptedServer, chunked

Serve = Callable[..., ScriptedServer]
SPEC = RequestSpec(0, ({"role": "user", "content": "hi"},), 8, 1)


def tokens_20ms_apart(peer: socket.socket) -> None:
    peer.sendall(SSE_HEAD)
    time.sleep(0.03)
    for text in ("a", "b", "c", "d"):
        peer.sendall(chunked(encode_chunk(chat_chunk("c", "m", 0, content=text))))
        time.sleep(0.02)
    peer.sendall(chunked(DONE) + b"0\r\n\r\n")


async def stream_with_a_busy_loop(server: ScriptedServer, mode: StampMode) -> dict[str, object]:
    url = server.url.removesuffix("/chat/completions")
    client = StreamClient(Endpoint(url, "m", usage="off"), MonotonicClock(), stamps=mode)
    task = asyncio.ensure_future(client.stream(SPEC, "r1"))
    deadline = time.monotonic() + 10
    while not server.requests:  # the request is out (a busy machine may take a while)
        assert time.monotonic() < deadline, "the request did not reach the server"
        await asyncio.sleep(0.002)
    # Python work holding the GIL, so no thread can read: past the tokens (30-90 ms in) and
    # until the server wrote them all, however late a busy machine ran it.
    busy_until = time.monotonic() + 0.3
    while time.monotonic() < busy_until or server.running:
        assert time.monotonic() < deadline, "the server did not finish its script"
    sent = await task
    return dict(sent.timeline.meta) | {"events": len(sent.timeline)}


@pytest.mark.parametrize("mode", [StampMode.KERNEL, StampMode.USER])
def test_meta_says_which_stamps_and_how_many_events_shared_one(
    serve: Serve, mode: StampMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the rescuer's reads, tokens that arrive while the loop is busy must merge.
    watch = StallRescuer.watch
    monkeypatch.setattr(
        StallRescuer, "watch", lambda self, conn, rescue: watch(self, conn, rescue=False)
    )
    server = serve(tokens_20ms_apart)
    meta = asyncio.run(stream_with_a_busy_loop(server, mode))
    assert meta["stamps"] == mode.value
    if mode is StampMode.KERNEL:
        # Tokens that waited together in the kernel while the loop was busy share the last
        # one's stamp, and the stream says so (and is flagged by the runner's lag check).
        assert isinstance(meta["stamps_shared"], int)
        assert meta["stamps_shared"] >= 1
    else:
        assert meta["stamps_shared"] == 0  # user stamps are taken when read: never "late"
