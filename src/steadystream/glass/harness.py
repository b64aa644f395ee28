"""Drive a chat page in headless Chromium over replayed streams, and collect its glass.

The system's Chromium (Debian's ``chromium``; found as the report's browser tests find it)
is driven through Playwright for Python with ``executable_path``: no browser is downloaded.
For each run the harness opens the page with ``?api=<replay origin>``, waits for the page's
``window.steadystreamAsk``, asks once with a fresh request id, and waits (bounded) until the
page's probe has posted its report to the replay. The page contract is in docs/glass.md;
``examples/chat-page/`` follows it.

What comes back, per run: the page's arrivals (``where = client``, label
``vantage = browser``), its paints (``where = glass``) and what the replay wrote
(``where = replay``, its ground truth with the injections as causes), all with the same id.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from steadystream._exceptions import SteadystreamError
from steadystream._types import Where
from steadystream.replay.server import ReplayServer
from steadystream.timeline import Timeline

if TYPE_CHECKING:  # Playwright is an optional extra: imported where it runs
    from playwright.async_api import Browser

__all__ = ["GlassError", "GlassRun", "drive_page", "page_url"]

_ASK = "(options) => window.steadystreamAsk(options)"
_READY = "() => typeof window.steadystreamAsk === 'function'"
_REPORT_WAIT_S = 5.0
_POLL_S = 0.05
_CONSOLE_KEPT = 3  # a failed run names the page's last console errors
_SHOWN = 500  # characters of a console error, or of a page's answer, in a failure
# Headless flags shared with the report's screenshots, less what Playwright sets itself.
_FLAGS = ("--disable-gpu", "--disable-quic", "--no-first-run", "--mute-audio", "--hide-scrollbars")


class GlassError(SteadystreamError):
    """The browser, its driver or the page failed; the message says which and how to fix it."""


@dataclass
class GlassRun:
    """What the runs recorded, and what went wrong in the ones that failed."""

    timelines: list[Timeline] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def page_url(page: str, api: str) -> str:
    """The page's URL (a path, with or without a query, becomes ``file://``), ``api`` set."""
    if "://" not in page:
        name, mark, given = page.partition("?")
        path = Path(name)
        if not path.is_file():
            raise GlassError(f"page {name!r}: no such file (give a path or an http(s) URL)")
        page = path.resolve().as_uri() + mark + given
    parts = urlsplit(page)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "api"] + [("api", api)]
    return urlunsplit(parts._replace(query=urlencode(query)))


async def drive_page(
    page: str,
    replay: ReplayServer,
    *,
    runs: int,
    chromium: str,
    timeout_s: float = 120.0,
    prompt: str = "Tell me about streams.",
    on_run: Callable[[int, str | None], None] | None = None,
) -> GlassRun:
    """Run the page ``runs`` times against ``replay``; every wait is bounded by ``timeout_s``."""
    try:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import async_playwright
    except ImportError as exc:
        raise GlassError(
            "steadystream glass drives Chromium through Playwright for Python:"
            " pip install 'steadystream[glass]' (no browser download is needed)"
        ) from exc
    url = page_url(page, replay.url)
    result = GlassRun()
    async with async_playwright() as driver:
        try:
            browser = await driver.chromium.launch(
                executable_path=chromium, headless=True, args=list(_FLAGS), timeout=timeout_s * 1000
            )
        except PlaywrightError as exc:
            raise GlassError(f"Chromium at {chromium} would not start: {exc.message}") from exc
        try:
            for run in range(runs):
                request_id = f"glass-{int(time.time())}-{run + 1:04d}"
                error = await _one_run(browser, url, request_id, prompt, timeout_s)
                if error is None:
                    found = await _collect(replay, request_id)
                    if found:
                        result.timelines.extend(found)
                    else:
                        error = f"{request_id}: the page posted no glass report"
                if error is not None:
                    result.failures.append(error)
                if on_run is not None:
                    on_run(run, error)
        finally:
            await browser.close()
    return result


async def _one_run(
    browser: Browser, url: str, request_id: str, prompt: str, timeout_s: float
) -> str | None:
    from playwright.async_api import Error as PlaywrightError

    page = await browser.new_page(viewport={"width": 900, "height": 700})
    console: deque[str] = deque(maxlen=_CONSOLE_KEPT)  # (a page may log errors in a loop)
    page.on("console", lambda m: console.append(m.text[:_SHOWN]) if m.type == "error" else None)
    try:
        await page.goto(url, timeout=timeout_s * 1000)
        await page.wait_for_function(_READY, timeout=timeout_s * 1000)
        answer = await asyncio.wait_for(
            page.evaluate(_ASK, {"prompt": prompt, "requestId": request_id}), timeout_s
        )
    except (PlaywrightError, TimeoutError) as exc:
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        errors = f" (console: {'; '.join(console)})" if console else ""
        return f"{request_id}: {detail.splitlines()[0]}{errors}"
    finally:
        await page.close()
    if not isinstance(answer, dict) or answer.get("outcome") != "complete":
        return f"{request_id}: the page ended with {repr(answer)[:_SHOWN]}"
    return None


async def _collect(replay: ReplayServer, request_id: str) -> list[Timeline]:
    """The page's two timelines and the replay's record of the same request."""
    deadline = time.monotonic() + _REPORT_WAIT_S
    while True:
        page = [t for t in replay.glass_reports() if t.stream_id == request_id]
        if len(page) >= 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(_POLL_S)
    truth = replay.truth(request_id)
    if not page or truth is None:
        return page
    written = replace(truth.to_timeline(), where=Where.REPLAY)
    return [*page, written]
