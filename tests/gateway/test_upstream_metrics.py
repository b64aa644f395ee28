"""recording.engine_metrics: the gateway scrapes each upstream's /metrics beside its recordings."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import orjson

from steadystream.engine_metrics import SCHEMA, read_engine_metrics
from steadystream.gateway import GatewayServer
from steadystream.gateway.upstream_metrics import scraping_upstreams
from steadystream.lab import LabServer
from tests.support.gateway import chat_body, gateway_config, post, upstream


def test_each_upstream_that_answers_is_scraped_into_the_directory(tmp_path: Path) -> None:
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab-one"),
            {"name": "gone", "base_url": "http://127.0.0.1:9/v1", "priority": 1},
            recording={"enabled": True, "directory": str(tmp_path), "engine_metrics": True},
        )
        with GatewayServer(config) as gateway:
            post(gateway.base_url, "/chat/completions", chat_body(max_tokens=10))
            time.sleep(0.5)
    scraped = tmp_path / "engine-metrics-lab-one.jsonl"
    lines = [orjson.loads(x) for x in scraped.read_bytes().splitlines()]
    assert len(lines) >= 3
    assert lines[0]["schema"] == SCHEMA
    assert lines[0]["source"] == f"{lab.url}/metrics"
    assert "vllm:num_requests_running" in lines[0]["values"]
    assert len(read_engine_metrics(scraped)) == len(lines)
    assert not (tmp_path / "engine-metrics-gone.jsonl").exists()  # did not answer: skipped


def test_off_by_default(tmp_path: Path) -> None:
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab"), recording={"enabled": True, "directory": str(tmp_path)}
        )
        with GatewayServer(config) as gateway:
            post(gateway.base_url, "/chat/completions", chat_body(max_tokens=5))
    assert not list(tmp_path.glob("engine-metrics-*"))


def test_upstreams_are_asked_together_at_start(tmp_path: Path) -> None:
    # One after another, each upstream that does not answer held the gateway's start for a
    # second. Here the engine answers only once all three asks are in: asked in turn, the
    # first would time out alone.
    async def run() -> tuple[int, list[str]]:
        waiting: list[asyncio.StreamWriter] = []
        most = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal most
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                waiting.append(writer)
                most = max(most, len(waiting))
                if len(waiting) == 3:
                    page = b"vllm:num_requests_running 1\n"
                    for each in waiting:
                        each.write(
                            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
                            + str(len(page)).encode()
                            + b"\r\n\r\n"
                            + page
                        )
                        await each.drain()
                await reader.read()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = gateway_config(
            *({"name": f"up{i}", "base_url": f"http://127.0.0.1:{port}/v1"} for i in range(3)),
            recording={"enabled": True, "directory": str(tmp_path), "engine_metrics": True},
        )
        try:
            async with scraping_upstreams(config) as scrapers:
                names = sorted(s.path.name for s in scrapers)
        finally:
            for each in waiting:
                each.close()
            server.close()
        return most, names

    most, names = asyncio.run(run())
    assert most == 3
    assert names == [f"engine-metrics-up{i}.jsonl" for i in range(3)]
