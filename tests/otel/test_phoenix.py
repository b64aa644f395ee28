"""A real OTLP receiver: Arize Phoenix (from PyPI, in its own virtual environment: the
``peers`` target of the Makefile) takes the gateway's spans over OTLP/HTTP, and its REST API
gives back one span per stream with the conventions' attributes and ours, each inside the
client's trace."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from steadystream._processes import free_port
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import chat_body, gateway_config, post, upstream
from tests.support.real_parts import ROOT, Child, start_child

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def phoenix_binary() -> Path:
    """The ``phoenix`` of the peer environment the Makefile builds (PEER_VENVS), or where
    STEADYSTREAM_ARIZE_PHOENIX says; skipped with what to run when it is not there."""
    given = os.environ.get("STEADYSTREAM_ARIZE_PHOENIX")
    if given:
        return Path(given)
    peers = re.search(r"^PEER_VENVS := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert peers is not None
    name = next(p for p in peers[1].split() if p.startswith("arize-phoenix-"))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    binary = cache / "steadystream" / "peers" / name / "bin" / "phoenix"
    if not binary.exists():
        pytest.fail(f"Arize Phoenix is not installed ({binary}): run `make peers`")
    return binary


def start_phoenix(tmp: Path) -> tuple[Child, str]:
    port, grpc = free_port(), free_port()
    env = {
        "PHOENIX_WORKING_DIR": str(tmp / "phoenix"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    url = f"http://127.0.0.1:{port}"
    child = start_child(
        [str(phoenix_binary()), "serve"], url=url, ready_path="/healthz", log=tmp / "phoenix.log",
        env=env, timeout_s=240,
    )  # fmt: skip
    return child, url


def spans_in_phoenix(url: str, count: int, *, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(
            f"{url}/v1/projects/default/spans?limit=100", timeout=10
        ) as response:
            spans: list[dict[str, Any]] = json.load(response)["data"]
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def test_phoenix_receives_one_span_per_stream_through_the_gateway(tmp_path: Path) -> None:
    phoenix, phoenix_url = start_phoenix(tmp_path)
    clients = {}
    try:
        with (
            LabServer("steady", seed=5) as primary,
            LabServer("steady", seed=6) as fallback,
        ):
            config = gateway_config(
                upstream(primary, "primary", fault="stall-after=3:forever"),
                upstream(fallback, "fallback", priority=1),
                watchdog={"first_token_timeout": "5s", "stall_timeout": "600ms"},
                failover={"policy": "continue"},
            )
            env = {
                "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix_url,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_METRICS_EXPORTER": "none",  # Phoenix takes traces only
                "OTEL_SERVICE_NAME": "steadystream-gateway-test",
            }
            with GatewayServer(config, env=env) as gateway:
                for i in range(3):
                    trace_id, span_id = f"{i + 1:032x}", f"{i + 17:016x}"
                    streamed = post(
                        gateway.base_url, "/chat/completions",
                        chat_body(12, stream_options={"include_usage": True}),
                        {"traceparent": f"00-{trace_id}-{span_id}-01"}, timeout=30,
                    )  # fmt: skip
                    assert streamed.status == 200
                    assert streamed.done
                    clients[streamed.headers["x-request-id"]] = (trace_id, span_id)
            # the gateway's shutdown flushed its spans
        spans = spans_in_phoenix(phoenix_url, len(clients))
    finally:
        phoenix.stop()
    assert len(spans) == 3, phoenix.log_text()[-2000:]
    by_request = {span["attributes"]["steadystream.request_id"]: span for span in spans}
    assert sorted(by_request) == sorted(clients)
    for request_id, (trace_id, span_id) in clients.items():
        span = by_request[request_id]
        a = span["attributes"]
        assert span["name"] == "chat lab"
        assert span["context"]["trace_id"] == trace_id  # inside the client's trace
        assert span["parent_id"] == span_id
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "lab"
        assert a["gen_ai.request.stream"] is True
        assert a["gen_ai.response.time_to_first_chunk"] > 0
        assert a["gen_ai.usage.input_tokens"] > 0
        assert a["gen_ai.usage.output_tokens"] > 0
        assert a["server.address"] == "127.0.0.1"
        assert a["server.port"] == int(fallback.base_url.rsplit(":", 1)[1].split("/")[0])
        assert a["steadystream.outcome"] == "failed-over"
        assert a["steadystream.failover.attempts"] == 2
        assert a["steadystream.stream.stalls"] >= 1
        assert a["steadystream.stream.worst_gap"] >= 0.6
        assert a["steadystream.stream.p99_gap"] > 0
        assert "stall" in a["steadystream.stream.stall_causes"]
        names = [event["name"] for event in span["events"]]
        assert "steadystream.failover" in names
        assert "steadystream.stall" in names
