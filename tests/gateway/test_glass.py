"""Glass reports at the gateway: bound to the answer the poster was served, once; recorded in
files of their own that never rotate a stream away; within each client's budget."""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from steadystream._api_errors import ApiError
from steadystream._types import Where
from steadystream.files import read_jsonl
from steadystream.gateway.server import GatewayServer
from steadystream.replay import ReplayServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, get, post
from tests.support.timelines import make_timeline

pytestmark = pytest.mark.integration

TOKEN = "X-Steadystream-Glass-Token"
GLASS = {"accept": True}
RECORDING = {"enabled": True}


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    recorded = make_timeline([50.0 + 10 * i for i in range(8)], stream_id="rec")
    with ReplayServer([recorded]) as server:
        yield server


def gateway(replay: ReplayServer, sink: MemorySink | None = None, **sections: Any) -> GatewayServer:
    config = gateway_config({"name": "replay", "base_url": replay.base_url}, **sections)
    return GatewayServer(config, recorder=sink)


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


def answer_token(gw: GatewayServer, request_id: str, **headers: str) -> str:
    """Have the gateway answer ``request_id`` (streamed), and give the glass token it sent."""
    answered = post(
        gw.base_url, "/chat/completions", chat_body(), {"X-Request-Id": request_id, **headers}
    )
    assert answered.done
    return answered.headers[TOKEN.lower()]


def post_report(
    gw: GatewayServer, body: dict[str, Any] | bytes, token: str | None = None, **headers: str
) -> Any:
    if token is not None:
        headers[TOKEN] = token
    return post(gw.url, "/steadystream/glass", body, headers)


def test_an_answer_carries_a_token_and_its_report_is_recorded_next_to_the_edges(
    replay: ReplayServer,
) -> None:
    sink = MemorySink()
    with gateway(replay, sink, glass=GLASS, recording=RECORDING) as gw:
        status, source = get(gw.url, "/steadystream/glass.js")
        assert status == 200
        assert b"SteadystreamGlass" in source
        assert b"x-steadystream-glass-token" in source  # the probe sends it back
        token = answer_token(gw, "page-1")
        sink.edges("page-1")  # (the gateway's own two, once it has finished the stream)
        assert post_report(gw, report("page-1"), token).status == 204
        client, glass = (t for t in sink.timelines if t.where in (Where.CLIENT, Where.GLASS))
        assert (client.where, glass.where) == (Where.CLIENT, Where.GLASS)
        assert client.times.tolist() == [20_000_000, 40_000_000, 41_000_000]
        assert glass.tokens.tolist() == [1, 2]
        # the tenant is the token's, whatever the page says
        assert glass.labels == {"renderer": "naive", "tenant": "default", "vantage": "browser"}


def test_a_whole_answer_carries_a_token_too_and_none_without_glass(replay: ReplayServer) -> None:
    whole = chat_body(stream=False)
    with gateway(replay, MemorySink(), glass=GLASS, recording=RECORDING) as gw:
        answered = post(gw.base_url, "/chat/completions", whole, {"X-Request-Id": "whole-1"})
        assert answered.status == 200
        token = answered.headers[TOKEN.lower()]
        assert token.endswith(".whole-1")
        assert post_report(gw, report("whole-1"), token).status == 204
        refused = post(gw.base_url, "/chat/completions", {"model": "replay"})
        assert refused.status == 400
        assert TOKEN.lower() not in refused.headers  # an error answers nothing to report on
    with gateway(replay, MemorySink()) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body())
        assert answered.done
        assert TOKEN.lower() not in answered.headers


def error_of(answer: Any) -> tuple[int, str | None, str | None]:
    error = answer.json()["error"]
    return answer.status, error["code"], error["param"]


def test_a_report_without_its_answers_token_is_refused_and_nothing_is_recorded(
    replay: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANT_A", "sk-tenant-a")
    monkeypatch.setenv("TENANT_B", "sk-tenant-b")
    tenants = [
        {"name": "a", "api_key_env": ["TENANT_A"]},
        {"name": "b", "api_key_env": ["TENANT_B"]},
    ]
    a = {"Authorization": "Bearer sk-tenant-a"}
    b = {"Authorization": "Bearer sk-tenant-b"}
    sink = MemorySink()
    with gateway(replay, sink, glass=GLASS, recording=RECORDING, tenants=tenants) as gw:
        # Today's forgery: a report on another tenant's stream id, with a key and no token.
        assert post(
            gw.base_url, "/chat/completions", chat_body(), {"X-Request-Id": "a-1", **a}
        ).done
        assert post_report(gw, report("a-1"), **b).status == 403
        a_token = answer_token(gw, "a-1", **a)
        b_token = answer_token(gw, "b-1", **b)
        with gateway(
            replay, MemorySink(), glass=GLASS, recording=RECORDING, tenants=tenants
        ) as other:
            foreign = answer_token(other, "a-1", **a)  # another gateway's (secret), same id
        forged = a_token.replace(".a-1", ".a-2")  # the id changed, the MAC kept
        refusals = {
            "no token": post_report(gw, report("a-1"), **a),
            "garbage": post_report(gw, report("a-1"), "not-a-token", **a),
            "another stream's": post_report(gw, report("a-2"), a_token, **a),
            "an id swapped": post_report(gw, report("a-2"), forged, **a),
            "another tenant's": post_report(gw, report("a-1"), a_token, **b),
            "for b's stream, from a": post_report(gw, report("b-1"), b_token, **a),
            "another gateway's": post_report(gw, report("a-1"), foreign, **a),
        }
        seen = {what: error_of(answer) for what, answer in refusals.items()}
        assert seen == {
            "no token": (403, "glass_token_missing", TOKEN),
            "garbage": (403, "glass_token_invalid", TOKEN),
            "another stream's": (403, "glass_token_other_stream", "stream_id"),
            "an id swapped": (403, "glass_token_invalid", TOKEN),
            "another tenant's": (403, "glass_token_invalid", TOKEN),
            "for b's stream, from a": (403, "glass_token_invalid", TOKEN),
            "another gateway's": (403, "glass_token_invalid", TOKEN),
        }
        for answer in refusals.values():
            assert "sk-tenant" not in answer.body.decode()
            assert a_token not in answer.body.decode()  # a token is never quoted back
        assert post_report(gw, report("a-1"), a_token).status == 401  # the key comes first
        assert not [t for t in sink.timelines if t.where in (Where.CLIENT, Where.GLASS)]
        # Each token is good for one report, from its own tenant.
        assert post_report(gw, report("a-1"), a_token, **a).status == 204
        again = post_report(gw, report("a-1"), a_token, **a)
        assert error_of(again) == (409, "glass_report_taken", "stream_id")
        assert post_report(gw, report("b-1"), b_token, **b).status == 204
        glass = sorted(
            (t.stream_id, t.labels["tenant"]) for t in sink.timelines if t.where is Where.GLASS
        )
        assert glass == [("a-1", "a"), ("b-1", "b")]


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
def test_a_bad_report_is_refused_naming_the_field_and_its_token_stays_good(
    replay: ReplayServer, changes: dict[str, Any], status: int, param: str
) -> None:
    sink = MemorySink()
    with gateway(replay, sink, glass=GLASS, recording=RECORDING) as gw:
        token = answer_token(gw, "page-1")
        answer = post_report(gw, report(**changes), token)
        assert answer.status == status
        error = answer.json()["error"]
        assert (error["param"] or "body").startswith(param), error
        assert post_report(gw, b"{not json", token).status == 400
        assert not [t for t in sink.timelines if t.where is Where.GLASS]
        # bad input loses nothing: the page may still send its good report
        assert post_report(gw, report(), token).status == 204


def test_reports_are_refused_unless_accepted_and_recorded(replay: ReplayServer) -> None:
    with gateway(replay, MemorySink()) as gw:
        refused = post_report(gw, report())
        assert refused.status == 403
        assert "glass.accept" in refused.json()["error"]["message"]


def recorded(directory: Path) -> dict[str, set[str]]:
    """Each stream id's vantage points, over every timeline file in ``directory``."""
    seen: dict[str, set[str]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        run = read_jsonl(path)
        assert run.truncated_line is None
        for t in run.timelines:
            seen.setdefault(t.stream_id, set()).add(t.where.value)
    return seen


EDGES = {"gateway-upstream", "gateway-downstream"}


def keep_alive_posts(gw: GatewayServer, bodies: list[tuple[bytes, dict[str, str]]]) -> list[int]:
    """POST each body to the intake on one kept-alive connection, as the probe found."""
    url = urlsplit(gw.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    statuses = []
    try:
        for body, headers in bodies:
            connection.request(
                "POST",
                "/steadystream/glass",
                body=body,
                headers={"Content-Type": "application/json", **headers},
            )
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
    finally:
        connection.close()
    return statuses


def test_a_flood_of_reports_leaves_every_real_streams_record_on_disk(
    replay: ReplayServer, tmp_path: Path
) -> None:
    # Today's recording keeps 4 streams at most (2 files of 2): room for the 3 real ones.
    directory = tmp_path / "recordings"
    recording = {**RECORDING, "directory": str(directory), "rotate_streams": 2, "keep_files": 2}
    with gateway(replay, glass=GLASS, recording=recording) as gw:
        for i in range(3):
            assert post(
                gw.base_url, "/chat/completions", chat_body(), {"X-Request-Id": f"real-{i}"}
            ).done
        # The probe's flood: 400 tiny reports on one connection, with no token.
        no_token: dict[str, str] = {}
        flood = [(orjson.dumps(report(f"flood-{i}")), no_token) for i in range(400)]
        statuses = keep_alive_posts(gw, flood)
    seen = recorded(directory)
    for i in range(3):  # every real stream's record: both edges
        assert seen.get(f"real-{i}") == EDGES, f"real-{i}"
    assert set(statuses) == {403}
    assert not [i for i in seen if i.startswith("flood-")]


def test_reports_the_gateway_takes_never_rotate_a_stream_away(
    replay: ReplayServer, tmp_path: Path
) -> None:
    directory = tmp_path / "recordings"
    recording = {**RECORDING, "directory": str(directory), "rotate_streams": 2, "keep_files": 2}
    glass = {**GLASS, "client_report_burst": 1000}
    with gateway(replay, glass=glass, recording=recording) as gw:
        tokens = {f"real-{i}": answer_token(gw, f"real-{i}") for i in range(3)}
        # 400 reports the gateway takes (tokens it minted, as if for 400 answers), then the
        # 3 real streams' own, all on one connection.
        minted = gw.state.glass_tokens
        assert minted is not None
        taken = [
            (orjson.dumps(report(f"taken-{i}")), {TOKEN: minted.mint(f"taken-{i}", "default")})
            for i in range(400)
        ]
        taken += [(orjson.dumps(report(i)), {TOKEN: t}) for i, t in tokens.items()]
        assert set(keep_alive_posts(gw, taken)) == {204}
    seen = recorded(directory)
    for stream_id in tokens:  # every real stream: the gateway's edges and the page's
        assert seen[stream_id] == EDGES | {"client", "glass"}, stream_id
    assert sum(1 for i in seen if i.startswith("taken-")) == 400
    assert len(list(directory.glob("gateway-*.jsonl"))) == 2
    # analyze finds them all in the folder: the glass files sit beside the streams'
    from steadystream.analysis import timeline_files

    names = [p.name for p in timeline_files([directory])]
    assert [n.split("-")[0] for n in names] == ["gateway", "gateway", "glass"]


def test_glass_files_keep_to_their_own_disk_budget(replay: ReplayServer, tmp_path: Path) -> None:
    directory = tmp_path / "recordings"
    recording = {**RECORDING, "directory": str(directory)}
    budget = 1_048_576
    glass = {
        **GLASS,
        "max_body_bytes": "128KiB",
        "max_disk_bytes": budget,
        "client_report_burst": 1000,
        "client_byte_burst": "64MiB",
    }
    events = [[float(i), 1] for i in range(5000)]  # 108 KB a body, 178 KB on disk
    with gateway(replay, glass=glass, recording=recording) as gw:
        real = answer_token(gw, "real-0")
        minted = gw.state.glass_tokens
        assert minted is not None
        bodies = [
            (
                orjson.dumps(report(f"big-{i}", arrivals=events, frames=events)),
                {TOKEN: minted.mint(f"big-{i}", "default")},
            )
            for i in range(60)
        ]
        assert set(keep_alive_posts(gw, bodies)) == {204}
        assert post_report(gw, report("real-0"), real).status == 204
    glass_files = list(directory.glob("glass-*.jsonl"))
    on_disk = sum(f.stat().st_size for f in glass_files)
    assert on_disk <= budget  # one worker: the budget, with no other worker's file past it
    assert on_disk > budget // 2  # (the reports did fill it: they were 10 MB)
    seen = recorded(directory)
    assert seen["real-0"] == EDGES | {"client", "glass"}  # the newest glass stays
    assert "big-0" not in seen  # the oldest went, and only glass went


def test_a_clients_reports_past_its_budget_get_429_with_retry_after(
    replay: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANT_A", "sk-tenant-a")
    monkeypatch.setenv("TENANT_B", "sk-tenant-b")
    tenants = [
        {"name": "a", "api_key_env": ["TENANT_A"]},
        {"name": "b", "api_key_env": ["TENANT_B"]},
    ]
    a = {"Authorization": "Bearer sk-tenant-a"}
    b = {"Authorization": "Bearer sk-tenant-b"}
    glass = {**GLASS, "client_report_burst": 2, "client_reports_per_s": 0.001}
    with gateway(replay, MemorySink(), glass=glass, recording=RECORDING, tenants=tenants) as gw:
        tokens = [answer_token(gw, f"a-{i}", **a) for i in range(3)]
        assert [post_report(gw, report(f"a-{i}"), tokens[i], **a).status for i in range(2)] == [
            204,
            204,
        ]
        over = post_report(gw, report("a-2"), tokens[2], **a)
        assert error_of(over) == (429, "glass_rate_limited", None)
        assert over.headers["retry-after"] == "1000"
        # another client (tenant) has a budget of its own
        assert post_report(gw, report("b-0"), answer_token(gw, "b-0", **b), **b).status == 204


def test_tokens_expire_and_budgets_refill_on_the_gateways_clock() -> None:
    from starlette.testclient import TestClient

    from steadystream._clock import NS_PER_S, FakeClock
    from steadystream.gateway.app import create_app

    clock = FakeClock()
    glass = {**GLASS, "token_ttl": "60s", "client_report_burst": 1, "client_reports_per_s": 0.5}
    config = gateway_config({"name": "u", "base_url": "http://127.0.0.1:9/v1"}, glass=glass)
    sink = MemorySink()
    app = create_app(config, clock=clock, recorder=sink)
    tokens = app.state.gateway.glass_tokens
    with TestClient(app) as http:

        def send(stream_id: str, token: str) -> Any:
            body = orjson.dumps(report(stream_id))
            return http.post("/steadystream/glass", content=body, headers={TOKEN: token})

        first, second = tokens.mint("r-1", "default"), tokens.mint("r-2", "default")
        assert send("r-1", first).status_code == 204
        over = send("r-2", second)
        assert (over.status_code, over.headers["retry-after"]) == (429, "2")
        asyncio.run(clock.advance(2 * NS_PER_S))
        assert send("r-2", second).status_code == 204
        late = tokens.mint("r-3", "default")
        asyncio.run(clock.advance(61 * NS_PER_S))
        expired = send("r-3", late)
        assert (expired.status_code, expired.json()["error"]["code"]) == (
            403,
            "glass_token_expired",
        )
    assert sorted(t.stream_id for t in sink.timelines if t.where is Where.GLASS) == ["r-1", "r-2"]


def test_every_worker_of_a_gateway_takes_the_others_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from steadystream import ConfigError
    from steadystream.gateway.app import create_app
    from steadystream.gateway.glass import glass_secret

    config = gateway_config({"name": "u", "base_url": "http://127.0.0.1:9/v1"}, glass=GLASS)
    shared = glass_secret()  # what the workers' parent hands each worker
    one = create_app(config, glass_secret=shared).state.gateway.glass_tokens
    two = create_app(config, glass_secret=shared).state.gateway.glass_tokens
    assert two.check(one.mint("r-1", "default"), "default").stream_id == "r-1"
    alone = create_app(config).state.gateway.glass_tokens  # a gateway of one process
    with pytest.raises(ApiError):
        alone.check(one.mint("r-1", "default"), "default")
    # Replicas (and restarts) share a secret from the environment, which wins.
    named = gateway_config(
        {"name": "u", "base_url": "http://127.0.0.1:9/v1"},
        glass={**GLASS, "secret_env": "GLASS_SECRET"},
    )
    env = {"GLASS_SECRET": "x" * 32}
    three = create_app(named, env=env, glass_secret=shared).state.gateway.glass_tokens
    four = create_app(named, env=env).state.gateway.glass_tokens
    assert four.check(three.mint("r-1", "default"), "default").stream_id == "r-1"
    for env in ({}, {"GLASS_SECRET": "short"}):
        with pytest.raises(ConfigError, match=r"glass\.secret_env.*GLASS_SECRET"):
            create_app(named, env=env)


def test_the_workers_parent_makes_one_secret_for_all_its_workers(tmp_path: Path) -> None:
    from steadystream._processes import Child, free_port, steadystream_command
    from steadystream.lab import LabServer

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    recordings = tmp_path / "recordings"
    with LabServer("steady") as lab:
        config = tmp_path / "gateway.yaml"
        config.write_text(
            f"server: {{port: {port}, workers: 2}}\n"
            f"upstreams: [{{name: lab, base_url: '{lab.base_url}'}}]\n"
            f"recording: {{enabled: true, directory: '{recordings}'}}\n"
            "glass: {accept: true}\n"
        )
        command = steadystream_command("gateway", "--config", str(config))
        with Child("the gateway", command, health_url=f"{url}/healthz"):
            tokens = {}
            for i in range(8):  # a connection each: the kernel picks the worker
                answered = post(
                    f"{url}/v1",
                    "/chat/completions",
                    chat_body(5, model="lab"),
                    {"X-Request-Id": f"w-{i}"},
                )
                assert answered.done
                tokens[f"w-{i}"] = answered.headers[TOKEN.lower()]
            first = [
                post(url, "/steadystream/glass", report(i), {TOKEN: t}).status
                for i, t in tokens.items()
            ]
            again = [
                post(url, "/steadystream/glass", report(i), {TOKEN: t}).status
                for i, t in tokens.items()
            ]
    assert first == [204] * 8  # whichever worker served the answer
    assert again == [409] * 8  # and once, whichever worker took the first


def test_a_page_on_an_allowed_origin_may_read_and_send_the_token(replay: ReplayServer) -> None:
    origin = "http://app.example.test"
    cors = {"allow_origins": [origin]}
    with gateway(replay, MemorySink(), glass=GLASS, recording=RECORDING, cors=cors) as gw:
        url = urlsplit(gw.url)
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
        try:
            connection.request(
                "OPTIONS",
                "/steadystream/glass",
                headers={
                    "Origin": origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type,x-steadystream-glass-token",
                },
            )
            preflight = connection.getresponse()
            preflight.read()
        finally:
            connection.close()
        assert preflight.status == 200
        allowed = preflight.getheader("access-control-allow-headers") or ""
        assert TOKEN.lower() in allowed.lower()
        answered = post(gw.base_url, "/chat/completions", chat_body(), {"Origin": origin})
        assert TOKEN.lower() in answered.headers["access-control-expose-headers"].lower()


def test_keys_a_page_echoes_in_its_labels_or_text_are_not_recorded(
    replay: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-tenant-a-0123456789abcdef"
    monkeypatch.setenv("TENANT_A", key)
    tenants = [{"name": "a", "api_key_env": ["TENANT_A"]}]
    auth = {"Authorization": f"Bearer {key}"}
    recording = {**RECORDING, "keep_text": True}
    sink = MemorySink()
    with gateway(replay, sink, glass=GLASS, recording=recording, tenants=tenants) as gw:
        token = answer_token(gw, "a-1", **auth)
        body = report("a-1", labels={"note": f"key {key}"}, texts=[key, "b", "c"])
        assert post_report(gw, body, token, **auth).status == 204
    page = [t for t in sink.timelines if t.where in (Where.CLIENT, Where.GLASS)]
    assert len(page) == 2
    assert all(key not in orjson.dumps(t.labels).decode() for t in page)
    assert page[0].texts is not None
    assert key not in "".join(page[0].texts)


def test_a_report_that_trickles_in_is_cut_at_the_body_timeout(replay: ReplayServer) -> None:
    from tests.support.gateway import connect, read_until

    with gateway(
        replay, MemorySink(), glass=GLASS, recording=RECORDING, server={"body_timeout": "200ms"}
    ) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body())
        token = answered.headers.get(TOKEN.lower(), "")
        sock = connect(gw.url)
        try:
            head = (
                f"POST /steadystream/glass HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n"
                f"{TOKEN}: {token}\r\n\r\n"
            )
            sock.sendall(head.encode() + b'{"schema": ')  # and nothing more
            answer = read_until(sock, b"}}")
        finally:
            sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_a_bad_glass_config_names_the_key() -> None:
    from steadystream import ConfigError

    for glass, fragment in (
        ({"client_byte_burst": "1KiB", "max_body_bytes": "2KiB"}, "client_byte_burst"),
        ({"max_disk_bytes": "2MiB"}, "max_disk_bytes"),
        ({"secret_env": "not a name"}, "glass.secret_env"),
        ({"token_ttl": "0s"}, "glass.token_ttl"),
        ({"client_reports_per_s": 0}, "glass.client_reports_per_s"),
        ({"max_clients": 0}, "glass.max_clients"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            gateway_config({"name": "u", "base_url": "http://127.0.0.1:9/v1"}, glass=glass)
