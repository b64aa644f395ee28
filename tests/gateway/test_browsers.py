"""Browsers at the gateway: CORS as configured, other origins refused, glass reports recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from steadystream._exceptions import ConfigError
from steadystream._types import Where
from steadystream.gateway.server import GatewayServer
from steadystream.replay import ReplayServer
from tests.conftest import make_timeline
from tests.gateway.conftest import MemorySink, chat_body, gateway_config, get, post

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
        ({"allow_methods": ["DELETE"]}, "allow_methods"),
        ({"allow_origins": ["*"], "allow_credentials": True}, "allow_credentials"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            gateway_config({"name": "u", "base_url": "http://127.0.0.1:1/v1"}, cors=cors)


def report(stream_id: str = "page-1", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schema": "steadystream.glass/1",
        "stream_id": stream_id,
        "started_at": 1_767_225_600.0,
        "labels": {"renderer": "naive"},
        "outcome": "complete",
        "first_byte_ms": 10.0,
        "end_ms": 120.0,
        "arrivals": [[20.0, 1], [40.0, 1], [41.0, 1]],
        "frames": [[25.0, 1], [50.0, 2]],
        "texts": None,
    }
    body.update(changes)
    return body


def post_report(gw: GatewayServer, body: dict[str, Any] | bytes, **headers: str) -> Any:
    return post(gw.url, "/steadystream/glass", body, headers)


def test_the_probe_is_served_and_reports_are_recorded_next_to_the_gateways_edges(
    replay: ReplayServer,
) -> None:
    sink = MemorySink()
    with gateway(replay, sink, glass={"accept": True}, recording={"enabled": True}) as gw:
        status, source = get(gw.url, "/steadystream/glass.js")
        assert status == 200
        assert b"SteadystreamGlass" in source
        assert post_report(gw, report()).status == 204
        client, glass = (t for t in sink.timelines if t.stream_id == "page-1")
        assert (client.where, glass.where) == (Where.CLIENT, Where.GLASS)
        assert client.times.tolist() == [20_000_000, 40_000_000, 41_000_000]
        assert glass.tokens.tolist() == [1, 2]
        assert glass.labels == {"renderer": "naive", "vantage": "browser"}


@pytest.mark.parametrize(
    ("changes", "status", "param"),
    [
        ({"frames": [[25.0, 1], [20.0, 1]]}, 400, "frames"),
        ({"frames": [[25.0, 9]]}, 400, "body"),
        ({"stream_id": "bad id!"}, 400, "stream_id"),
        ({"arrivals": [[float("1e12"), 1]]}, 400, "arrivals"),
        ({"secret": "x"}, 400, "secret"),
        ({"arrivals": [[1.0, 1]] * 30_000}, 413, "arrivals"),
    ],
)
def test_a_bad_report_is_refused_naming_the_field_and_nothing_is_recorded(
    replay: ReplayServer, changes: dict[str, Any], status: int, param: str
) -> None:
    sink = MemorySink()
    with gateway(replay, sink, glass={"accept": True}) as gw:
        answer = post_report(gw, report(**changes))
        assert answer.status == status
        error = answer.json()["error"]
        assert (error["param"] or "body").startswith(param), error
        assert post_report(gw, b"{not json").status == 400
        assert sink.timelines == []


def test_reports_are_refused_unless_accepted_and_need_a_key_when_the_gateway_has_tenants(
    replay: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gateway(replay, MemorySink()) as gw:
        refused = post_report(gw, report())
        assert refused.status == 403
        assert "glass.accept" in refused.json()["error"]["message"]
    monkeypatch.setenv("TENANT_KEY", "sk-tenant")
    tenants = [{"name": "t", "api_key_env": ["TENANT_KEY"]}]
    sink = MemorySink()
    with gateway(replay, sink, glass={"accept": True}, tenants=tenants) as gw:
        assert post_report(gw, report()).status == 401
        assert post_report(gw, report(), Authorization="Bearer sk-tenant").status == 204
        assert len(sink.timelines) == 2
        assert orjson.dumps(sink.timelines[0].labels)  # recorded, JSON-able labels


def test_reports_land_in_the_recording_files_next_to_the_gateways_edges(
    replay: ReplayServer, tmp_path: Path
) -> None:
    from steadystream.files import read_timelines

    directory = tmp_path / "recordings"
    recording = {"enabled": True, "directory": str(directory)}
    with gateway(replay, glass={"accept": True}, recording=recording) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(), {"X-Request-Id": "page-7"})
        assert answered.done
        assert post_report(gw, report("page-7")).status == 204
    recorded = [t for f in sorted(directory.iterdir()) for t in read_timelines(f).timelines]
    wheres = sorted(t.where.value for t in recorded if t.stream_id == "page-7")
    assert wheres == ["client", "gateway-downstream", "gateway-upstream", "glass"]
