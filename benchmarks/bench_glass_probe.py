"""The glass probe's own cost per token, in the page, measured in headless Chromium.

A blank page loads the probe (the file the package ships), then a loop appends TOKENS text
nodes to the document, once bare and once with the probe's calls around each append
(``arrived`` when the token "arrives", ``shown`` after the append), in alternating rounds so
both see the same machine. The difference per token is the probe's cost on the page's main
thread. The frame callback that stamps paints runs once per frame, not per token; its cost is
timed separately over real frames (FRAMES frames, a few tokens each).

    .venv/bin/python benchmarks/bench_glass_probe.py [--tokens 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from steadystream.glass.routes import probe_source
from steadystream.report import find_chromium

_LOOP = """({tokens, probe}) => {
  const out = document.body;
  const p = probe ? SteadystreamGlass.start({streamId: "bench"}) : null;
  const t0 = performance.now();
  for (let i = 0; i < tokens; i++) {
    if (p) p.arrived(1);
    out.append("w ");
    if (p) p.shown(1);
  }
  const elapsed = performance.now() - t0;
  out.textContent = "";
  return elapsed;
}"""

_FRAMES = """async (frames) => {
  const p = SteadystreamGlass.start({streamId: "frames"});
  const paint = p._paint.bind(p);
  let spent = 0;
  p.onFrame = (stamp) => {
    const t = performance.now();
    paint(stamp);
    spent += performance.now() - t;
  };
  for (let f = 0; f < frames; f++) {
    for (let k = 0; k < 3; k++) { p.arrived(1); document.body.append("w "); p.shown(1); }
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
  }
  document.body.textContent = "";
  return {spent, frames: p.frames.length};
}"""


async def measure(tokens: int, rounds: int, frames: int) -> None:
    from playwright.async_api import async_playwright

    chromium = find_chromium()
    if chromium is None:
        sys.exit("no Chromium: apt-get install chromium, or set STEADYSTREAM_CHROMIUM")
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, headless=True)
        page = await browser.new_page()
        await page.set_content("<!doctype html><body></body>")
        await page.add_script_tag(content=probe_source().decode())
        await page.evaluate(_LOOP, {"tokens": 2_000, "probe": True})  # warm the JIT
        bare: list[float] = []
        probed: list[float] = []
        for _ in range(rounds):
            bare.append(await page.evaluate(_LOOP, {"tokens": tokens, "probe": False}))
            probed.append(await page.evaluate(_LOOP, {"tokens": tokens, "probe": True}))
        framed = await page.evaluate(_FRAMES, frames)
        await browser.close()
    bare_ms, probed_ms = min(bare), min(probed)
    per_token_us = (probed_ms - bare_ms) * 1000 / tokens
    print(f"load average {os.getloadavg()[0]:.2f}; {tokens:,} tokens x {rounds} rounds (best)")
    print(f"append only:         {bare_ms:8.1f} ms  ({bare_ms * 1000 / tokens:.3f} µs/token)")
    print(f"append + probe:      {probed_ms:8.1f} ms  ({probed_ms * 1000 / tokens:.3f} µs/token)")
    print(f"probe per token:     {per_token_us:.3f} µs")
    spent, painted = framed["spent"], framed["frames"]
    print(
        f"frame callback:      {spent * 1000 / max(painted, 1):.1f} µs per painted frame"
        f" ({painted} frames)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=120)
    args = parser.parse_args()
    asyncio.run(measure(args.tokens, args.rounds, args.frames))


if __name__ == "__main__":
    main()
