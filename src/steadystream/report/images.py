"""Chart images (PNG and SVG) and page screenshots, drawn by headless Chromium.

The report page is opened in Chromium and plotly.js renders each chart to an image in the
page (``Plotly.toImage``), so the images are exactly what the report shows. What it needs:
a Chromium (the Debian package ``chromium``); no Python package beyond the core ones, and no
network. Without Chromium, :class:`BrowserError` says how to install it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import tempfile
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import orjson

from steadystream.report._browser import BrowserError, Page, open_page
from steadystream.report.html import write_report
from steadystream.report.model import Report

__all__ = ["IMAGE_FORMATS", "BrowserError", "screenshot", "wait_for_charts", "write_images"]

IMAGE_FORMATS = ("png", "svg")
_DEFAULT_HEIGHT = 450


def write_images(
    report: Report,
    directory: str | os.PathLike[str],
    *,
    formats: Sequence[str] = IMAGE_FORMATS,
    width: int = 1100,
    timeout: float = 120.0,
) -> list[Path]:
    """Write every chart of ``report`` as ``DIRECTORY/<chart id>.<format>``; return the paths."""
    unknown = sorted(set(formats) - set(IMAGE_FORMATS))
    if unknown:
        raise ValueError(f"unknown image format {unknown[0]!r}; accepted: png, svg")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="steadystream-report-") as tmp:
        page_path = Path(tmp) / "report.html"
        write_report(report, page_path)
        images = asyncio.run(_draw_images(page_path, report, formats, width, timeout))
    written = []
    for name, data in images:
        path = out / name
        path.write_bytes(data)
        written.append(path)
    return written


def screenshot(
    html_path: str | os.PathLike[str],
    png_path: str | os.PathLike[str],
    *,
    width: int = 1280,
    height: int = 900,
    full_page: bool = False,
    timeout: float = 90.0,
) -> int:
    """Open a report and save a PNG of it once every chart is drawn; return its size in bytes.

    ``full_page`` captures the whole page, else the first ``height`` pixels.
    """
    data = asyncio.run(_screenshot(html_path, width, height, full_page, timeout))
    Path(png_path).write_bytes(data)
    return len(data)


async def _draw_images(
    page_path: Path, report: Report, formats: Sequence[str], width: int, timeout: float
) -> list[tuple[str, bytes]]:
    images = []
    async with open_page(page_path, timeout=timeout) as page:
        await wait_for_charts(page)
        for chart in report.charts:
            height = chart.figure.layout.height or _DEFAULT_HEIGHT
            for fmt in formats:
                options = orjson.dumps({"format": fmt, "width": width, "height": height}).decode()
                url = await page.evaluate(
                    f"Plotly.toImage(document.getElementById('plot-{chart.id}'), {options})"
                )
                images.append((f"{chart.id}.{fmt}", _decode_data_url(url)))
    return images


async def _screenshot(
    html_path: str | os.PathLike[str], width: int, height: int, full_page: bool, timeout: float
) -> bytes:
    async with open_page(html_path, width=width, height=height, timeout=timeout) as page:
        await wait_for_charts(page)
        if full_page:
            tall = await page.evaluate("document.documentElement.scrollHeight")
            await page.resize(width, int(tall))
        shot = await page.call("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


async def wait_for_charts(page: Page) -> None:
    """Wait until the report page has drawn every chart (or say why it could not)."""
    ready = await page.evaluate(
        "window.steadystreamReady ? window.steadystreamReady.then(function () { return true; })"
        " : false"
    )
    if not ready:
        raise BrowserError("the page is not a steadystream report (no charts to wait for)")


def _decode_data_url(url: str) -> bytes:
    head, _, body = url.partition(",")
    if not head.startswith("data:"):
        raise BrowserError(f"plotly returned no image: {url[:60]!r}")
    if head.endswith(";base64"):
        return base64.b64decode(body)
    return urllib.parse.unquote(body).encode()
