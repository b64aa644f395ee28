"""Browsers at the gateway: CORS as configured, other origins refused (glass: test_glass.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from steadystream._exceptions import ConfigError
from steadystream.gateway.server import GatewayServer
from steadystream.replay import ReplayServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, post
from tests.support.timelines import make_timeline

pytestmark = pytest.mark.integration

ALLOWED = "http://app.example.test"
OTHER = "http://evil.example.test"


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    recorded = make_timeline([50.0 + 10 * i for i in range(8)], stream_id="rec")
    with ReplayServer([recorded]) as server:
        yield server


def gateway(replay: ReplayServer, sink: MemorySink | None = None, **sections: Any) -> GatewayServer:
    config = gateway_config({"name": "replay", "base_url": replay.base_url}, **sections)
    return GatewayServer(config, recorder=sink)


def options(url: str, origin: str, method: str = "POST") -> tuple[int, dict[str, str]]:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(
            "OPTIONS",
            "/v1/chat/completions",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": method,
                "Access-Control-Request-Headers": "content-type,x-request-id",
            },
        )
        response = connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def requests_seen(replay: ReplayServer) -> int:
    return replay.call_in_loop(lambda: len(replay.state.truths))


def test_by_default_no_cors_and_another_origins_post_never_reaches_upstream(
    replay: ReplayServer,
) -> None:
    with gateway(replay) as gw:
        status, headers = options(gw.url, OTHER)
        assert status == 403  # refused by origin, before routing
        assert "access-control-allow-origin" not in headers
        before = requests_seen(replay)
        # a "simple" request: browsers send it without a preflight
        refused = post(
            gw.base_url,
            "/chat/completions",
            chat_body(),
            {"Origin": OTHER, "Content-Type": "text/plain"},
        )
        assert refused.status == 403
        error = refused.json()["error"]
        assert error["code"] == "origin_not_allowed"
        assert OTHER in error["message"]
        assert requests_seen(replay) == before
        # no Origin (SDKs, curl): untouched
        assert post(gw.base_url, "/chat/completions", chat_body()).done


def test_an_allowed_origin_gets_preflight_and_a_readable_stream_another_does_not(
    replay: ReplayServer,
) -> None:
    with gateway(replay, cors={"allow_origins": [ALLOWED]}) as gw:
        status, headers = options(gw.url, ALLOWED)
        assert status == 200
        assert headers["access-control-allow-origin"] == ALLOWED
        assert "POST" in headers["access-control-allow-methods"]
        assert "x-request-id" in headers["access-control-allow-headers"].lower()
        streamed = post(gw.base_url, "/chat/completions", chat_body(), {"Origin": ALLOWED})
        assert streamed.done
        assert streamed.headers["access-control-allow-origin"] == ALLOWED
        assert "x-request-id" in streamed.headers["access-control-expose-headers"]
        status, headers = options(gw.url, OTHER)
        assert status in (400, 403)
        assert "access-control-allow-origin" not in headers


def test_a_bad_cors_config_names_the_key() -> None:
    for cors, fragment in (
        ({"allow_origins": ["app.example.test/path"]}, "allow_origins"),
        ({"allow_methods": ["PUT"]}, "allow_methods"),
        ({"allow_origins": ["*"], "allow_credentials": True}, "allow_credentials"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            gateway_config({"name": "u", "base_url": "http://127.0.0.1:1/v1"}, cors=cors)
