"""A real buffering proxy: nginx in front of the lab, buffering on and off, and the gateway.

nginx buffers an event stream only when it cannot see where each piece ends: with its default
HTTP/1.0 towards the upstream and a close-delimited answer (the lab runs under h11 here, see
``tests.support.real_parts.asgi_child``), it holds the body until a buffer (4 KiB, about 20
chunks) fills.
An upstream that answers ``X-Accel-Buffering: no`` turns that off for its responses; the
lab sends it too (as llama-cpp-python does), so the runs that stand for an engine that does
not (vLLM) tell nginx to ignore it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Outcome, Timeline
from steadystream.bench import Bench, ClosedLoop, Endpoint, RunOptions, Workload, lab_timeline
from steadystream.bench.workload import builtin_prompts
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.findings import Finding, find
from steadystream.metrics import MetricConfig, fleet_metrics, stream_table
from tests.integration._apps import GATEWAY_CONFIG_ENV
from tests.support.real_parts import Child, asgi_child, nginx

pytestmark = pytest.mark.integration

_register()
runner = CliRunner()

BUFFERING_ON = ["proxy_buffering on"]
BUFFERING_OFF = ["proxy_buffering off"]
# Stand for an engine that does not ask proxies to stop buffering.
IGNORE_UPSTREAM_HEADER = ["proxy_ignore_headers X-Accel-Buffering"]
STREAMS = 6
TOKENS = 60  # 1.5 s at the lab's 25 ms cadence: several buffer-fulls per stream


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Child]:
    child = asgi_child("steadystream.lab.app:create_app", tmp_path_factory.mktemp("lab"))
    try:
        yield child
    finally:
        child.stop()


@pytest.fixture(scope="module")
def gateway(lab: Child, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Child]:
    tmp = tmp_path_factory.mktemp("gateway")
    config = tmp / "gateway.yaml"
    config.write_text(f"upstreams:\n  - name: lab\n    base_url: {lab.url}/v1\n")
    child = asgi_child(
        "tests.integration._apps:gateway", tmp, env={GATEWAY_CONFIG_ENV: str(config)}
    )
    try:
        yield child
    finally:
        child.stop()


def bench(url: str) -> list[Timeline]:
    async def run() -> list[Timeline]:
        endpoint = Endpoint(f"{url}/v1", "lab")
        workload = Workload(builtin_prompts(), max_tokens=TOKENS)
        async with Bench(endpoint, workload, lab_truth="off") as session:
            result = await session.run(ClosedLoop(3), RunOptions(max_requests=STREAMS))
        return result.timelines

    return asyncio.run(run())


def truth(lab: Child, timelines: Sequence[Timeline]) -> list[Timeline]:
    """The lab's ground truth of the same requests, as timelines (``where = lab``)."""

    async def fetch() -> list[Timeline]:
        async with aiohttp.ClientSession() as session:
            out = []
            for t in timelines:
                async with session.get(f"{lab.url}/lab/requests/{t.stream_id}") as response:
                    assert response.status == 200
                    out.append(lab_timeline(await response.json()))
            return out

    return asyncio.run(fetch())


def buffering(timelines: Sequence[Timeline]) -> Finding | None:
    config = MetricConfig()
    table = stream_table(timelines, config)
    found = [
        f for f in find(table, fleet_metrics(table, config), config) if f.code == "proxy-buffering"
    ]
    return found[0] if found else None


def through_nginx(upstream: Child, directives: list[str], tmp: Path) -> list[Timeline]:
    with nginx(upstream.url, directives, tmp) as proxy:
        timelines = bench(proxy.url)
    assert [t.outcome for t in timelines] == [Outcome.COMPLETE] * STREAMS
    return timelines


def test_buffering_on_is_found_with_the_first_byte_late(lab: Child, tmp_path: Path) -> None:
    client = through_nginx(lab, BUFFERING_ON + IGNORE_UPSTREAM_HEADER, tmp_path / "nginx")
    finding = buffering(client)
    assert finding is not None, "nginx buffered the streams but no finding says so"
    assert finding.streams == STREAMS
    # With the lab's ground truth of the same requests: the engine wrote token by token, the
    # client got lumps, and its first byte came long after the engine's first token.
    lab_side = truth(lab, client)
    both = buffering([*lab_side, *client])
    assert both is not None
    assert f"{STREAMS} of {STREAMS} streams" in both.message
    assert "after the upstream's first token" in both.message
    table = stream_table([*lab_side, *client])
    per_arrival = table.column("chunks_per_arrival")
    # The lab wrote event by event, save where it woke late and wrote what was due at once
    # (a busy machine); the client got lumps of a buffer-full.
    assert (per_arrival[:STREAMS] < 2.0).all()
    assert (per_arrival[STREAMS:] >= 4.0).all()
    ttfb_late = table.column("ttfb_s")[STREAMS:] - table.column("ttft_s")[:STREAMS]
    assert (ttfb_late > 0.1).all(), ttfb_late


def test_analyze_and_report_name_it(lab: Child, tmp_path: Path) -> None:
    client = through_nginx(lab, BUFFERING_ON + IGNORE_UPSTREAM_HEADER, tmp_path / "nginx")
    run = tmp_path / "run.jsonl"
    write_jsonl(run, [*truth(lab, client), *client])
    result = runner.invoke(app, ["analyze", str(run), "--json"])
    assert result.exit_code == 0, result.output
    codes = [f["code"] for f in orjson.loads(result.output)["findings"]]
    assert codes[0] == "proxy-buffering"
    page = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(page)])
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert '<li id="finding-proxy-buffering">' in html
    assert 'href="#worst-streams"' in html


def test_buffering_off_is_not_found(lab: Child, tmp_path: Path) -> None:
    client = through_nginx(lab, BUFFERING_OFF + IGNORE_UPSTREAM_HEADER, tmp_path / "nginx")
    assert buffering(client) is None
    assert buffering([*truth(lab, client), *client]) is None
    assert (stream_table(client).column("chunks_per_arrival") < 2.0).all()


def test_the_gateway_in_front_turns_buffering_off(gateway: Child, tmp_path: Path) -> None:
    # nginx buffering on, honouring its upstream's X-Accel-Buffering: the gateway sends "no".
    client = through_nginx(gateway, BUFFERING_ON, tmp_path / "honoured")
    assert buffering(client) is None
    # The same path with the header ignored is buffered: the header is what made the difference.
    ignored = through_nginx(gateway, BUFFERING_ON + IGNORE_UPSTREAM_HEADER, tmp_path / "ignored")
    assert buffering(ignored) is not None
