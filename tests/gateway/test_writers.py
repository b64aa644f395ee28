"""What the stuck-client rule sees of a client's connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

import pytest

from steadystream import _uvicorn
from steadystream._uvicorn import ClientLink
from steadystream.gateway import GatewayServer
from steadystream.gateway import server as server_module
from steadystream.gateway.writers import unsent_bytes
from steadystream.lab import LabServer
from tests.support.gateway import chat_body, gateway_config, post, upstream


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


@pytest.mark.integration
def test_the_relay_finds_its_client_connection_without_scanning_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # uvicorn's own send leads to the connection; the scan of every open connection (a cost
    # per request that grows with the streams in flight) is only for a send something wrapped.
    found: list[ClientLink] = []
    original = server_module.client_link

    def recording(server: object) -> Callable[..., object]:
        find = original(server)  # type: ignore[arg-type]

        def spy(scope: object, send: object) -> object:
            found.append(link := find(scope, send))  # type: ignore[arg-type]
            return link

        return spy

    def no_scan(*args: object) -> None:
        raise AssertionError("scanned uvicorn's connections")

    monkeypatch.setattr(server_module, "client_link", recording)
    monkeypatch.setattr(_uvicorn, "connection_of", no_scan)
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"))) as gateway,
    ):
        streamed = post(gateway.base_url, "/chat/completions", chat_body(4))
    assert streamed.done
    assert len(found) == 1
    assert hasattr(found[0].transport, "get_write_buffer_size")
    assert found[0].frames  # uvicorn chunks it: the line may write frames between its sends
