"""Disconnects reach the engine; a client that stops reading costs bounded memory, then is cut."""

from __future__ import annotations

import time

import pytest

from steadystream import Outcome
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer, scenario_from_mapping
from tests.support.gateway import (
    MemorySink,
    chat_body,
    connect,
    finished_truth,
    gateway_config,
    raw_request,
    read_until,
    upstream,
    wall_time,
)

pytestmark = pytest.mark.integration

FREED_WITHIN_S = 0.100


# Holds the engine's release to 100 ms of real time: run alone, after the rest (serial), so
# that a busy machine's pause is not read as a late cancel.
@pytest.mark.serial
@pytest.mark.parametrize(
    ("fault", "events_before_leaving"),
    [("slow-first-token=3s", 0), (None, 3)],
    ids=["before-first-token", "after-first-token"],
)
def test_a_disconnect_frees_the_sequence_in_the_engine(
    sink: MemorySink, fault: str | None, events_before_leaving: int
) -> None:
    with (
        LabServer("steady") as lab,
        # (no grace: the generation is cancelled as the client leaves, gateway/resume)
        GatewayServer(
            gateway_config(upstream(lab, "lab", fault=fault), resume={"grace": 0}), recorder=sink
        ) as gw,
    ):
        sock = connect(gw.base_url)
        sock.sendall(
            raw_request(gw.base_url, "/chat/completions", chat_body(200), X_Request_Id="bye")
        )
        seen = read_until(sock, b"\r\n\r\n")  # the gateway committed the stream
        if events_before_leaving:
            seen += read_until(sock, b'"content":"', count=events_before_leaving + 1)
        left_at = time.time()
        sock.close()
        truth = finished_truth(lab, "bye")
        _, down = sink.edges("bye")
    assert seen.startswith(b"HTTP/1.1 200")
    assert truth.finish_reason == "cancelled"
    freed = wall_time(truth, truth.kv_freed_ns) - left_at
    noticed = wall_time(truth, truth.disconnect_noticed_ns) - left_at
    assert freed < FREED_WITHIN_S, f"noticed after {noticed:.3f} s, freed after {freed:.3f} s"
    if events_before_leaving:
        assert truth.tokens_written >= events_before_leaving
    else:
        assert truth.tokens_generated == 0
    assert down.outcome is Outcome.CANCELLED
    latency = down.meta["cancel_latency_ns"]
    assert 0 <= latency < FREED_WITHIN_S * 1e9


def test_a_client_that_stops_reading_is_bounded_then_cut(sink: MemorySink) -> None:
    # A lab that writes a token a millisecond, so a stuck client fills every buffer quickly.
    fast = scenario_from_mapping(
        {"scheduler": {"step_base_ms": 1.0}, "output": {"min_tokens": 8000, "max_tokens": 8000}}
    )
    with LabServer(fast) as lab:
        config = gateway_config(
            upstream(lab, "lab"),
            limits={"buffer_bytes": "16KiB", "stuck_timeout": "400ms"},
            watchdog={"stall_timeout": "1s"},
        )
        with GatewayServer(config, recorder=sink) as gw:
            sock = connect(gw.base_url, rcvbuf=4096)
            sock.sendall(
                raw_request(gw.base_url, "/chat/completions", chat_body(8000), X_Request_Id="slow")
            )
            assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 200")
            # ...and read nothing more.
            _, down = sink.edges("slow", timeout=20)
            truth = finished_truth(lab, "slow")
            sock.close()
    assert down.outcome is Outcome.CLIENT_STUCK
    assert "read nothing" in (down.error or "")
    # Backpressure held: the reader waited on a full buffer, which never went past its bound
    # (plus one read of at most 64 KiB, aiohttp's own bounded buffer).
    assert down.meta["buffer_waits"] > 0
    assert down.meta["buffer_peak_bytes"] <= 16 * 1024 + 64 * 1024
    # Cutting the client cancelled the upstream: the lab stopped generating.
    assert truth.finish_reason == "cancelled"
    assert truth.tokens_generated < 8000
