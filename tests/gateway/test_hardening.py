"""Issue 11's medium findings: what the gateway shows, to whom, and how it treats odd clients."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from steadystream import Outcome
from steadystream.gateway import GatewayServer
from tests.support.gateway import MemorySink, chat_body, connect, gateway_config, get, post
from tests.support.hostile import HostileUpstream

pytestmark = pytest.mark.integration

TENANT_ENV = {"WEB_KEY": "gw-web-123"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with HostileUpstream() as server:
        yield server


def plain(upstream: HostileUpstream, name: str = "any") -> dict[str, Any]:
    return {"name": name, "base_url": upstream.base_url}


def test_unknown_paths_and_methods_answer_openai_style_json(upstream: HostileUpstream) -> None:
    with GatewayServer(gateway_config(plain(upstream))) as gw:
        missing_status, missing = get(gw.url, "/v1/assistants")
        wrong_status, wrong = get(gw.url, "/v1/chat/completions")
    assert missing_status == 404
    assert orjson.loads(missing)["error"]["code"] == "not_found"
    assert "/v1/assistants" in orjson.loads(missing)["error"]["message"]
    assert wrong_status == 405
    assert orjson.loads(wrong)["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("metrics_auth", [True, False])
def test_metrics_and_health_need_a_key_when_tenants_exist_unless_told(
    upstream: HostileUpstream, metrics_auth: bool
) -> None:
    config = gateway_config(
        plain(upstream),
        tenants=[{"name": "web", "api_key_env": ["WEB_KEY"]}],
        server={"metrics_auth": metrics_auth},
    )
    with GatewayServer(config, env=TENANT_ENV) as gw:
        open_metrics, _ = get(gw.url, "/metrics")
        open_health, _ = get(gw.url, "/healthz")
        keyed, body = get(gw.url, "/metrics", {"Authorization": "Bearer gw-web-123"})
    expected = 401 if metrics_auth else 200
    assert (open_metrics, open_health) == (expected, expected)
    assert keyed == 200
    assert b"steadystream_active_streams" in body


def test_model_labels_are_bounded(upstream: HostileUpstream) -> None:
    config = gateway_config({**plain(upstream), "models": []}, limits={"max_model_labels": 2})
    with GatewayServer(config) as gw:
        for i in range(6):
            answer = post(gw.base_url, "/chat/completions", {**chat_body(3), "model": f"m{i}"})
            assert answer.done
        _, metrics = get(gw.url, "/metrics")
    models = set(re.findall(rb'steadystream_streams_total\{model="([^"]*)"', metrics))
    assert models == {b"m0", b"m1", b"other"}


def test_non_streaming_failovers_are_recorded_and_counted_like_streaming_ones(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    # Port 9 (discard), as everywhere in these tests: no server there. A port that was free a
    # moment ago can be any server's by the time the gateway connects (another test's, on a
    # machine shared with other jobs), and then "dead" answers: no failover at all.
    dead = {"name": "dead", "base_url": "http://127.0.0.1:9/v1", "priority": 0}
    config = gateway_config(dead, {**plain(upstream, "alive"), "priority": 1})
    with GatewayServer(config, recorder=sink) as gw:
        answer = post(
            gw.base_url,
            "/chat/completions",
            chat_body(3, stream=False, hostile="header"),
            {"X-Request-Id": "whole"},
        )
        _, down = sink.edges("whole")
        _, metrics = get(gw.url, "/metrics")
    assert answer.status == 200
    assert down.outcome is Outcome.FAILED_OVER
    (entry,) = down.meta["failovers"]
    assert (entry["cause"], entry["from"], entry["to"]) == ("connect", "dead", "alive")
    assert (entry["kind"], entry["result"]) == ("retry", "completed")
    assert re.search(rb'failovers_total\{kind="retry",[^}]*result="completed"[^}]*\} 1.0', metrics)


def test_a_client_that_leaves_mid_body_leaves_no_traceback(
    upstream: HostileUpstream, capfd: pytest.CaptureFixture[str]
) -> None:
    with GatewayServer(gateway_config(plain(upstream))) as gw:
        for _ in range(3):
            sock = connect(gw.base_url)
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % gw.port
                + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model"'
            )
            time.sleep(0.05)
            sock.close()
        time.sleep(0.2)
        _, metrics = get(gw.url, "/metrics")
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "Exception in ASGI application" not in err
    assert re.search(rb'errors_total\{kind="client_disconnected",[^}]*\} 3.0', metrics)


def test_a_body_that_never_finishes_is_answered_at_the_body_timeout(
    upstream: HostileUpstream,
) -> None:
    config = gateway_config(plain(upstream), server={"body_timeout": "300ms"})
    with GatewayServer(config) as gw:
        # (the client waits 10 s at most for the answer: one only at the default 30 s body
        # timeout would fail it with a socket timeout)
        sock = connect(gw.base_url)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % gw.port
            + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        answer = _read_response(sock)
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"server.body_timeout" in answer


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_request_head_that_trickles_in_is_cut_at_the_header_timeout(
    upstream: HostileUpstream,
) -> None:
    config = gateway_config(plain(upstream), server={"header_timeout": "300ms"})
    with GatewayServer(config) as gw:
        idle = connect(gw.base_url)  # sends nothing at all
        loris = connect(gw.base_url)
        loris.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        lines_taken = []  # header lines each got in before it was cut (-1: it was answered)
        for sock in (idle, loris):
            sent = 0
            try:
                for _ in range(20):
                    sock.sendall(b"X-Slow: 1\r\n")  # a header line now and then...
                    sent += 1
                    time.sleep(0.1)
            except OSError:
                lines_taken.append(sent)
                continue
            lines_taken.append(-1 if sock.recv(1) else sent)
        idle.close()
        loris.close()
        served = post(gw.base_url, "/chat/completions", chat_body(3))  # others unharmed
    # ...each cut while it still trickled: the lines did not hold the connection open
    assert all(0 <= n < 20 for n in lines_taken), lines_taken
    assert served.done
