"""Headless Chromium opens the report from disk: no console error, no network, charts drawn."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import numpy as np

from steadystream import Timeline
from steadystream.report import CHART_IDS, build_report, write_report
from steadystream.report._browser import open_page
from steadystream.report.images import wait_for_charts
from steadystream.shaping import parse_spec, what_if
from tests.report._png import read_png
from tests.support.report import steady

# Each chart's div holds plotly's drawing once plotly has run: count those, not the divs.
_DRAWN = (
    "Array.from(document.querySelectorAll('.js-plotly-plot'))"
    ".filter(function (el) { return el.querySelector('svg.main-svg') !== null; })"
    ".map(function (el) { return el.id; })"
)
# Plotly's toolbar must not cover a chart's titles, legend or colour bar: the boxes it meets.
_TOOLBAR_OVERLAPS = (
    "(function () {"
    " function box(el) { var r = el.getBoundingClientRect();"
    "  return [r.left, r.top, r.right, r.bottom]; }"
    " function meet(a, b) { return a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]; }"
    " var out = [];"
    " document.querySelectorAll('.js-plotly-plot').forEach(function (plot) {"
    "  var bar = plot.querySelector('.modebar'); if (!bar) { return; }"
    "  var m = box(bar);"
    "  plot.querySelectorAll('.annotation, .g-gtitle, .legend, .colorbar').forEach(function (el) {"
    "   var b = box(el);"
    "   if (b[2] > b[0] && meet(m, b)) { out.push(plot.id + ': ' + el.textContent.slice(0, 40)); }"
    "  });"
    " });"
    " return out; })()"
)
_RELAYOUT = (
    "Promise.all(Array.from(document.querySelectorAll('.js-plotly-plot'))"
    ".map(function (el) { return Plotly.Plots.resize(el); }))"
    ".then(function () { return true; })"
)
_BOX = (
    "(function () { var r = document.getElementById('stall-map').getBoundingClientRect();"
    " return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; })()"
)


def _visit(path: Path, chromium: str) -> dict[str, Any]:
    async def visit() -> dict[str, Any]:
        async with open_page(path, chromium=chromium, width=1280, height=900) as page:
            await wait_for_charts(page)
            drawn = await page.evaluate(_DRAWN)
            pwned = await page.evaluate("window.pwned === undefined")
            left, top, width, height = await page.evaluate(_BOX)
            shot = await page.call(
                "Page.captureScreenshot",
                format="png",
                captureBeyondViewport=True,
                clip={"x": left, "y": top, "width": width, "height": height, "scale": 0.5},
            )
            overlaps = await page.evaluate(_TOOLBAR_OVERLAPS)
            await page.resize(700, 900)  # a narrow window wraps the legends
            await page.evaluate(_RELAYOUT)
            overlaps += await page.evaluate(_TOOLBAR_OVERLAPS)
            return {
                "errors": page.console_errors,
                "warnings": page.console_warnings,
                "overlaps": overlaps,
                "requests": page.requests,
                "drawn": drawn,
                "safe": pwned,
                "png": base64.b64decode(shot["data"]),
            }

    return asyncio.run(visit())


def test_chromium_draws_the_report_from_disk(
    sample_run: list[Timeline], chromium: str, tmp_path: Path
) -> None:
    hostile = steady('<!--<script></script><script>window.pwned=1</script>"', [20.0, 20.0, 30.0])
    run = [*sample_run, hostile]
    baseline = [t for t in sample_run if not t.stream_id.startswith("paused")]
    comparison = what_if(run, [parse_spec("leaky")])
    path = tmp_path / "report.html"
    write_report(build_report(run, baseline=baseline, whatif=comparison), path)

    seen = _visit(path, chromium)

    assert seen["errors"] == []
    assert seen["warnings"] == []  # plotly.js once warned of an invalid colour per stall bar
    assert seen["overlaps"] == []  # the toolbar covered the chunks chart's right-hand title
    assert seen["requests"] == []  # nothing asked of any network
    assert seen["drawn"] == [f"plot-{chart_id}" for chart_id in CHART_IDS]
    assert seen["safe"], "a stream id ran as script"
    pixels = read_png(seen["png"])[..., :3].astype(np.int64)
    assert pixels.shape[0] > 100
    assert pixels.shape[1] > 300
    not_white = (pixels < 245).any(axis=2)
    assert not_white.mean() > 0.05, "the stall map is blank"
    # The six 2 s freezes are dark red bars (the top of the colour scale).
    red = (pixels[..., 0] > 100) & (pixels[..., 1] < 60) & (pixels[..., 2] < 70)
    assert red.sum() > 50
