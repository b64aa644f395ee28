"""The example chat page survives a reload: in real headless Chromium, a reload mid-answer
shows what was shown and goes on from the gateway's kept stream (docs/gateway.md, "Resume"),
no text twice, none lost."""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from steadystream._processes import free_port
from steadystream.gateway.server import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import answer, finished_truth, gateway_config, upstream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGES = Path(__file__).resolve().parents[2] / "examples" / "chat-page"
TOKENS = 120


@pytest.fixture
def page_origin() -> Iterator[str]:
    """The page served over http on loopback (a page origin the gateway's CORS can allow)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", port), functools.partial(Quiet, directory=str(PAGES))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def reload_mid_answer(chromium: str, url: str) -> tuple[str, str, dict[str, object]]:
    """Ask, reload once some text is shown; what was shown before, at the end, and the
    resumed answer's outcome."""
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page()
            await page.goto(url, timeout=30_000)
            await page.wait_for_function("() => window.steadystreamAsk !== null", timeout=30_000)
            await page.evaluate(
                "() => { window.steadystreamAsk({prompt: 'Tell me', requestId: 'reload-1'}); }"
            )
            await page.wait_for_function(
                "() => document.getElementById('answer').textContent.length > 40",
                timeout=30_000,
            )
            await page.reload(timeout=30_000)
            before = await page.evaluate("() => document.getElementById('answer').textContent")
            resumed = await page.evaluate("() => window.steadystreamResumed")
            after = await page.evaluate("() => document.getElementById('answer').textContent")
        finally:
            await browser.close()
    return before, after, resumed


def test_a_reload_mid_answer_goes_on_where_it_stopped(page_origin: str, chromium: str) -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), cors={"allow_origins": [page_origin]})
        with GatewayServer(config) as gateway:
            url = f"{page_origin}/index.html?api={gateway.url}&model=lab&max_tokens={TOKENS}"
            before, after, resumed = asyncio.run(reload_mid_answer(chromium, url))
            truth = finished_truth(lab, "reload-1")
            seen = lab.call_in_loop(lambda: lab.engine.truths.ids())
    whole = "".join(answer(truth))
    assert len(before) > 40  # the reloaded page showed what had been shown
    assert whole.startswith(before)
    assert resumed == {"tokens": resumed["tokens"], "outcome": "complete"}
    assert 0 < int(resumed["tokens"]) < TOKENS  # the rest, not the whole answer again
    assert after == whole  # every piece once, in order
    assert seen == ["reload-1"]  # one generation: the reload asked for no second
