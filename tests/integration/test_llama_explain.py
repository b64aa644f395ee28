"""A network stall between the gateway and the client, on a real engine: explain finds it and
places it on the network, not on the engine (issue 14; docs/attribution.md#evidence).

llama.cpp (Gemma 3 270M) streams through the gateway, which records both of its edges; a TCP
relay between the gateway and the client freezes the response for 1.5 s after a few events,
then lets the backlog go. The client's timeline has the stall; the gateway's downstream edge,
which wrote every event on time into the relay, has none: the stall arose between the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from steadystream import Timeline, Where
from steadystream._processes import free_port
from steadystream.attribution import explain
from steadystream.bench import Bench, ClosedLoop, Endpoint, RunOptions, Workload, builtin_prompts
from steadystream.gateway import GatewayServer, config_from_mapping
from tests.support.gateway import MemorySink
from tests.support.real_parts import LLAMA_MODEL, NO_EOS, Child, llama_upstream

pytestmark = pytest.mark.integration

FREEZE_S = 1.5
FREEZE_AFTER_EVENTS = 6


@contextmanager
def freezing_relay(target_port: int) -> Iterator[int]:
    """A loopback TCP relay to ``target_port`` that, once per connection, stops passing the
    response on for FREEZE_S after FREEZE_AFTER_EVENTS SSE events: a network hiccup."""
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, freeze: bool
    ) -> None:
        seen = 0
        frozen = not freeze
        try:
            while data := await reader.read(65536):
                seen += data.count(b"data: ")
                if not frozen and seen >= FREEZE_AFTER_EVENTS:
                    frozen = True
                    await asyncio.sleep(FREEZE_S)  # the reads behind it queue up meanwhile
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    writers: set[asyncio.StreamWriter] = set()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", target_port)
        writers.update((client_w, up_w))
        await asyncio.gather(pipe(client_r, up_w, False), pipe(up_r, client_w, True))

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        started.set()
        async with server:
            await stop.wait()
        for writer in writers:  # connections still open (keep-alive): closed by us
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10), "the relay did not start"
    try:
        yield port
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def run_through(base_url: str) -> list[Timeline]:
    async def run() -> list[Timeline]:
        endpoint = Endpoint(
            base_url, LLAMA_MODEL, kind="completions", extra_body={"logit_bias": NO_EOS}
        )
        workload = Workload(builtin_prompts(), max_tokens=48)
        async with Bench(endpoint, workload, lab_truth="off") as bench:
            result = await bench.run(ClosedLoop(1), RunOptions(max_requests=1))
        return result.timelines

    return asyncio.run(run())


def test_a_network_stall_through_the_gateway_is_placed_on_the_network(llama: Child) -> None:
    sink = MemorySink()
    config = config_from_mapping(
        {
            "upstreams": [llama_upstream(llama)],
            "watchdog": {"first_token_timeout": "30s", "stall_timeout": "10s"},
        }
    )
    with GatewayServer(config, recorder=sink) as gateway, freezing_relay(gateway.port) as port:
        (client,) = run_through(f"http://127.0.0.1:{port}/v1")
    up, down = sink.edges(client.stream_id)
    explained = explain([client, up, down])
    assert explained.streams == 1  # the gateway's edges are evidence, not more streams
    placed = [s for s in explained.stalls if "absent at gateway-downstream" in s.evidence]
    assert len(placed) == 1, [s.evidence for s in explained.stalls]
    (stall,) = placed
    assert stall.where is Where.CLIENT
    assert stall.duration_s >= FREEZE_S * 0.9
    # On the network: a connection that froze, between the gateway and the client.
    assert stall.cause in ("connection-hiccup", "network-buffering")
    assert "present at client: it arose between them" in stall.evidence
    assert stall.confidence >= 0.9
    # Whatever else stalled (a CPU engine on a busy machine does) was seen at the gateway's
    # edges too: the engine's, never placed on the network after the gateway.
    for other in explained.stalls:
        if other is not stall:
            assert "also seen at gateway-downstream, gateway-upstream" in other.evidence
