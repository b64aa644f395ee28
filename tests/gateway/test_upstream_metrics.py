"""recording.engine_metrics: the gateway scrapes each upstream's /metrics beside its recordings."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from steadystream.engine_metrics import SCHEMA, read_engine_metrics
from steadystream.gateway import GatewayServer
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
