"""Keys, tenants and limits; an upstream key never appears anywhere but its Authorization header."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from steadystream.gateway import GatewayServer, TimelineRecorder
from steadystream.lab import LabServer
from tests.support.gateway import Streamed, chat_body, gateway_config, get, post, upstream
from tests.support.hostile import HostileUpstream

pytestmark = pytest.mark.integration

KEYS = {"WEB_KEY": "gw-web-123", "BATCH_KEY": "gw-batch-456"}
SECRET = "sk-upstream-very-secret-0042"


@pytest.fixture(scope="module")
def tenants_gateway() -> Iterator[GatewayServer]:
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab"),
            tenants=[
                {"name": "web", "api_key_env": ["WEB_KEY"], "models": ["lab"]},
                {"name": "batch", "api_key_env": ["BATCH_KEY"], "models": ["other"]},
            ],
            limits={"max_body_bytes": "2KiB"},
        )
        with GatewayServer(config, env=KEYS) as gateway:
            yield gateway


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "missing_api_key"),
        (bearer("gw-wrong"), 401, "invalid_api_key"),
        (bearer("gw-batch-456"), 403, "model_not_allowed"),
    ],
)
def test_keys_and_models(
    tenants_gateway: GatewayServer, headers: dict[str, str], status: int, code: str
) -> None:
    answer = post(tenants_gateway.base_url, "/chat/completions", chat_body(3), headers)
    assert answer.status == status
    assert answer.json()["error"]["code"] == code


def test_a_known_key_is_served(tenants_gateway: GatewayServer) -> None:
    served = post(tenants_gateway.base_url, "/chat/completions", chat_body(3), bearer("gw-web-123"))
    assert served.status == 200
    assert served.done
    status, models = get(tenants_gateway.url, "/v1/models", bearer("gw-batch-456"))
    assert status == 200
    assert orjson.loads(models)["data"] == []  # batch may use no model the gateway serves


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (orjson.dumps({"model": "lab"}), 400, "messages"),
        (orjson.dumps({**chat_body(3), "max_tokens": -1}), 400, "max_tokens"),
        (orjson.dumps({**chat_body(3), "padding": "x" * 4096}), 413, None),
        (orjson.dumps({**chat_body(3), "model": "unknown"}), 403, None),
    ],
)
def test_bad_input(
    tenants_gateway: GatewayServer, body: bytes, status: int, param: str | None
) -> None:
    answer = post(tenants_gateway.base_url, "/chat/completions", body, bearer("gw-web-123"))
    assert answer.status == status
    error = answer.json()["error"]
    assert error["param"] == param
    assert error["message"]


def _paced(gateway: GatewayServer, spec: str) -> Streamed:
    headers = {**bearer("gw-web-123"), "X-Steadystream-Pacer": spec}
    return post(gateway.base_url, "/chat/completions", chat_body(3), headers)


def test_a_bad_pacer_header_is_400(tenants_gateway: GatewayServer) -> None:
    answer = _paced(tenants_gateway, "wobbly")
    assert answer.status == 400
    assert answer.json()["error"]["param"] == "X-Steadystream-Pacer"
    assert "leaky" in answer.json()["error"]["message"]  # the accepted pacers are listed


@pytest.mark.parametrize(
    "spec",
    ["leaky:interval=100000s", "phrase:stagger=2s", "reading:buffer=1h", "rechunk:max_wait=5s"],
)
def test_a_header_pacer_may_not_hold_each_token_past_a_second(
    tenants_gateway: GatewayServer, spec: str
) -> None:
    # A client could hold its stream, and the upstream's connection, open for hours.
    answer = _paced(tenants_gateway, spec)
    assert answer.status == 400
    error = answer.json()["error"]
    assert error["param"] == "X-Steadystream-Pacer"
    assert "at most 1s in a request's header" in error["message"]


def test_a_header_pacer_within_the_bound_is_taken(tenants_gateway: GatewayServer) -> None:
    answer = _paced(tenants_gateway, "leaky:interval=1s,tail=30s")
    assert answer.status == 200


def test_the_upstream_key_never_leaks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    recorder = TimelineRecorder(tmp_path)
    with HostileUpstream(default="auth") as echo:
        config = gateway_config(
            {
                "name": "echo",
                "base_url": f"http://127.0.0.1:{echo.port}/v1",
                "api_key_env": "UPSTREAM_KEY",
            }
        )
        with GatewayServer(config, recorder=recorder, env={"UPSTREAM_KEY": SECRET}) as gateway:
            refused = post(gateway.base_url, "/chat/completions", chat_body(3))
            streamed = post(gateway.base_url, "/chat/completions", chat_body(3, stream=False))
            _, metrics = get(gateway.url, "/metrics")
        recorder.close()
    assert echo.seen_keys == [f"Bearer {SECRET}"] * 2  # it did reach the upstream
    assert refused.status == 401  # the upstream's status passes through...
    assert "Incorrect API key provided: ***" in refused.json()["error"]["message"]
    assert streamed.status == 401
    places = {
        "error responses": refused.body + streamed.body,
        "metrics": metrics,
        "logs": caplog.text.encode(),
        "recordings": b"".join(path.read_bytes() for path in tmp_path.iterdir()),
    }
    assert places["recordings"]  # the streams were recorded
    assert "Incorrect API key provided: ***" in caplog.text  # and the refusals logged
    for where, data in places.items():
        assert SECRET.encode() not in data, where
