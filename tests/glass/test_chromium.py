"""The glass harness in real headless Chromium: probe timelines arrive, the browser's arrivals
keep the replay's timing, CORS lets an allowed origin read a stream and stops another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from steadystream._types import Where
from steadystream.files import read_timelines
from steadystream.gateway.server import GatewayServer
from steadystream.glass.edges import compare_edges, paint_delays_ns
from steadystream.glass.harness import GlassRun, drive_page
from steadystream.replay import ReplayServer, parse_injection
from steadystream.timeline import Timeline
from tests.support.gateway import gateway_config
from tests.support.report import SAMPLE_RUN

# A real browser's frames and timers against the replay's clock: run alone (make test).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]

PAGE = Path(__file__).resolve().parents[2] / "examples" / "chat-page" / "index.html"
MS = 1_000_000


@pytest.fixture(scope="module")
def steady_run() -> list[Timeline]:
    run = read_timelines(SAMPLE_RUN).timelines
    return [t for t in run if t.stream_id in ("steady-0", "paused-0")]


def drive(page: str, replay: ReplayServer, chromium: str, runs: int) -> GlassRun:
    return asyncio.run(drive_page(page, replay, runs=runs, chromium=chromium, timeout_s=60))


def by_where(timelines: list[Timeline]) -> dict[str, dict[Where, Timeline]]:
    runs: dict[str, dict[Where, Timeline]] = {}
    for t in timelines:
        runs.setdefault(t.stream_id, {})[t.where] = t
    return runs


def test_probe_timelines_arrive_and_the_browser_keeps_the_replays_timing(
    steady_run: list[Timeline], chromium: str
) -> None:
    with ReplayServer(steady_run) as replay:
        result = drive(str(PAGE), replay, chromium, runs=2)
    assert result.failures == []
    runs = by_where(result.timelines)
    assert len(runs) == 2
    for recorded, edges in zip(steady_run, runs.values(), strict=True):
        client, glass, written = edges[Where.CLIENT], edges[Where.GLASS], edges[Where.REPLAY]
        assert client.labels == {"renderer": "naive", "vantage": "browser"}
        tokens = int(recorded.text_mask.sum())  # the page counts one token per delta
        assert int(client.tokens.sum()) == int(glass.tokens.sum()) == tokens
        delays = paint_delays_ns(client, glass)
        assert delays.min() >= 0  # never painted before it arrived
        assert np.median(delays) < 50 * MS  # the naive page paints on the next frame or so
        # the browser's reader keeps the replay's timing: its cadence, its length and the
        # recorded 2 s pause (single gaps move with this shared machine's load: the per-gap
        # tolerance is held over loopback, tests/replay/test_rerecord.py)
        recorded_gaps = np.diff(recorded.times[recorded.text_mask])
        arrived_gaps = np.diff(client.times)
        assert len(arrived_gaps) == len(recorded_gaps)
        assert abs(np.median(arrived_gaps) - np.median(recorded_gaps)) <= 3 * MS
        assert abs(int(arrived_gaps.sum()) - int(recorded_gaps.sum())) <= 0.03 * recorded_gaps.sum()
        if recorded.stream_id.startswith("paused"):
            assert abs(int(arrived_gaps.max()) - int(recorded_gaps.max())) <= 60 * MS
        assert written.stream_id == client.stream_id
    comparison = compare_edges(result.timelines)
    assert comparison is not None
    assert comparison.streams == 2
    assert comparison.labels == {"renderer": "naive"}


def first_paint_delay_s(result: GlassRun) -> float:
    """From the first token's arrival in the page to its paint, in the run's only stream."""
    (edges,) = by_where(result.timelines).values()
    return float(paint_delays_ns(edges[Where.CLIENT], edges[Where.GLASS])[0]) / 1e9


def test_the_smoothing_renderer_paints_fewer_bursts_and_starts_later(
    steady_run: list[Timeline], chromium: str
) -> None:
    # jitter makes tokens arrive closer than a frame now and then: bursts for the naive page
    jitter = [parse_injection("jitter:40ms")]
    with ReplayServer(steady_run[:1], injections=jitter, seed=1) as replay:
        naive = drive(f"{PAGE.as_uri()}?renderer=naive", replay, chromium, runs=1)
        smooth = drive(f"{PAGE.as_uri()}?renderer=smooth", replay, chromium, runs=1)
    assert naive.failures == smooth.failures == []
    naive_edges = compare_edges(naive.timelines)
    smooth_edges = compare_edges(smooth.timelines)
    assert naive_edges is not None
    assert smooth_edges is not None
    assert smooth_edges.labels == {"renderer": "smooth"}
    # the start-up hold (250 ms) is latency the smoothing adds, at the first paint and after:
    # from the first token's arrival to its paint, within each run (two runs' TTFTs differ by
    # as much as a busy machine delays a page)
    assert smooth_edges.glass.ttft_p50_s is not None
    assert naive_edges.glass.ttft_p50_s is not None
    # (the hold's timer fires no earlier than 250 ms; the naive page's next frame may come
    # late on a busy machine: 100 ms of it allowed)
    assert first_paint_delay_s(smooth) >= 0.24  # (the page's clock is coarsened)
    assert first_paint_delay_s(smooth) - first_paint_delay_s(naive) > 0.15
    assert smooth_edges.paint_delay_p50_s is not None
    assert naive_edges.paint_delay_p50_s is not None
    assert smooth_edges.paint_delay_p50_s > naive_edges.paint_delay_p50_s
    # one token a frame, where the naive page painted bursts
    assert naive_edges.multi_token_frame_share is not None
    assert smooth_edges.multi_token_frame_share is not None
    assert smooth_edges.multi_token_frame_share < naive_edges.multi_token_frame_share


# -- CORS, from pages on two origins -------------------------------------------------------------

# Both page origins are on loopback, as the gateway is here (Chromium keeps pages on public
# origins from loopback addresses whatever CORS says): the replay's origin, by address and by
# name, serves as the two pages (its /healthz is a document like any other).
_FETCH = """async (url) => {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: {"content-type": "application/json", "x-request-id": "cors-" + location.host},
      body: JSON.stringify({model: "m", stream: true, messages: [{role: "user", content: "hi"}]}),
    });
    const reader = response.body.getReader();
    let chunks = 0;
    for (;;) { const {done} = await reader.read(); if (done) break; chunks += 1; }
    return {ok: true, chunks, id: response.headers.get("x-request-id")};
  } catch (error) { return {ok: false, error: String(error)}; }
}"""


async def fetch_from(origin: str, url: str, chromium: str) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page()
            await page.goto(f"{origin}/healthz")
            result: dict[str, Any] = await page.evaluate(_FETCH, url)
            return result
        finally:
            await browser.close()


def test_cors_preflight_passes_for_an_allowed_origin_and_fails_for_another(
    steady_run: list[Timeline], chromium: str
) -> None:
    with ReplayServer(steady_run[:1]) as replay:
        allowed_origin = replay.url
        other_origin = f"http://localhost:{replay.port}"
        config = gateway_config(
            {"name": "replay", "base_url": replay.base_url},
            cors={"allow_origins": [allowed_origin]},
        )
        with GatewayServer(config) as server:
            url = f"{server.base_url}/chat/completions"
            allowed = asyncio.run(fetch_from(allowed_origin, url, chromium))
            other = asyncio.run(fetch_from(other_origin, url, chromium))
        seen = replay.call_in_loop(lambda: replay.state.truths.ids())
    assert allowed["ok"], allowed
    assert allowed["chunks"] >= 1
    assert allowed["id"] == f"cors-127.0.0.1:{replay.port}"  # exposed to the page's script
    assert not other["ok"]
    assert "Failed to fetch" in other["error"]
    assert seen == [allowed["id"]]  # the other origin never reached the upstream


_PROBE_REPORT = """async (keepText) => {
  const probe = SteadystreamGlass.start({streamId: "p-1", keepText});
  probe.arrived(1, "the user's secret");
  document.body.append("the user's secret");
  probe.shown(1);
  return JSON.parse(await probe.finish("complete"));
}"""


async def probe_report(chromium: str, keep_text: bool) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    from steadystream.glass.routes import probe_source

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page()
            await page.set_content("<!doctype html><body></body>")
            await page.add_script_tag(content=probe_source().decode())
            result: dict[str, Any] = await page.evaluate(_PROBE_REPORT, keep_text)
            return result
        finally:
            await browser.close()


def test_no_text_leaves_the_page_unless_the_page_asks(chromium: str) -> None:
    quiet = asyncio.run(probe_report(chromium, keep_text=False))
    assert "secret" not in str(quiet)
    assert quiet["texts"] is None
    assert [n for _, n in quiet["arrivals"]] == [1]
    ((painted, tokens),) = quiet["frames"]
    assert tokens == 1
    assert painted >= quiet["arrivals"][0][0]
    told = asyncio.run(probe_report(chromium, keep_text=True))
    assert told["texts"] == ["the user's secret"]


# -- the probe against the gateway: the answer's token read, and sent back -----------------------

_PROBE_AT_GATEWAY = """async (api) => {
  const probe = SteadystreamGlass.start({report: api + "/steadystream/glass"});
  const response = await fetch(api + "/v1/chat/completions", {
    method: "POST",
    headers: {"content-type": "application/json", "x-request-id": "chromium-1"},
    body: JSON.stringify({model: "m", stream: true, messages: [{role: "user", content: "hi"}]}),
  });
  probe.firstByte(response);
  const reader = response.body.getReader();
  for (;;) {
    const {done} = await reader.read();
    if (done) break;
    probe.arrived(1);
    document.body.append("x");
    probe.shown(1);
  }
  await probe.finish("complete");
  return probe.streamId;
}"""


async def report_through(origin: str, api: str, chromium: str) -> str:
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page()
            await page.goto(f"{origin}/healthz")
            await page.add_script_tag(url=f"{api}/steadystream/glass.js")
            stream_id: str = await page.evaluate(_PROBE_AT_GATEWAY, api)
            return stream_id
        finally:
            await browser.close()


def test_the_probe_sends_back_the_token_a_gateway_on_another_origin_handed_it(
    steady_run: list[Timeline], chromium: str
) -> None:
    from tests.support.gateway import MemorySink

    sink = MemorySink()
    with ReplayServer(steady_run[:1]) as replay:
        config = gateway_config(
            {"name": "replay", "base_url": replay.base_url},
            cors={"allow_origins": [replay.url]},
            glass={"accept": True},
            recording={"enabled": True},
        )
        with GatewayServer(config, recorder=sink) as gateway:
            stream_id = asyncio.run(report_through(replay.url, gateway.url, chromium))
    assert stream_id == "chromium-1"
    glass = [t for t in sink.timelines if t.where is Where.GLASS]
    assert [(t.stream_id, t.labels["tenant"]) for t in glass] == [("chromium-1", "default")]
    assert int(glass[0].tokens.sum()) >= 1
