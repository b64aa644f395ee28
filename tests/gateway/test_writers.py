"""What the stuck-client rule sees of a client's connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from steadystream.gateway.writers import unsent_bytes


@pytest.mark.asyncio
async def test_unsent_bytes_falls_as_a_slow_client_reads() -> None:
    # The transport hands everything to the kernel (its own buffer is soon empty); what a
    # slow client has not taken waits in the kernel's send queue, and falls as it reads.
    listener = socket.create_server(("127.0.0.1", 0))
    connected: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set_result(writer)

    server = await asyncio.start_server(accept, sock=listener)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(listener.getsockname())
    client.setblocking(False)
    try:
        writer = await asyncio.wait_for(connected, 5)
        assert unsent_bytes(None) is None
        writer.write(b"x" * 1_000_000)
        await asyncio.sleep(0.1)
        before = unsent_bytes(writer.transport)
        assert before is not None
        assert before > 500_000
        read = 0
        for _ in range(50):
            with contextlib.suppress(BlockingIOError):
                read += len(client.recv(65536))
            await asyncio.sleep(0.01)
        after = unsent_bytes(writer.transport)
        assert after is not None
        assert read > 0
        assert after < before  # the client drained: the rule sees it
        writer.close()
    finally:
        client.close()
        server.close()
        await server.wait_closed()
