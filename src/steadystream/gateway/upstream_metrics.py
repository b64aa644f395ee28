"""Scrape every upstream's engine metrics into the recording directory while the gateway runs.

With ``recording.engine_metrics`` on, each upstream's ``/metrics`` (at the origin of its
``base_url``) is scraped every 100 ms into ``DIRECTORY/engine-metrics-NAME.jsonl``, the same
sidecar format ``bench --engine-metrics`` writes, so ``steadystream explain`` can read the
engine's side of a stall recorded at the gateway (docs/attribution.md#engine-metrics).
An upstream that does not answer with Prometheus text is not scraped; scraping never fails a
request. Its own aiohttp session, so scrapes take none of the upstream connection budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from yarl import URL

from steadystream._validation import shown_url
from steadystream.engine_metrics import (
    STOP_GRACE_S,
    EngineScraper,
    gateway_metrics_path,
)
from steadystream.gateway.config import GatewayConfig

__all__ = ["scraping_upstreams"]

log = logging.getLogger("steadystream.gateway")


@asynccontextmanager
async def scraping_upstreams(config: GatewayConfig) -> AsyncIterator[list[EngineScraper]]:
    """Scrape while the body runs (nothing unless recording and ``engine_metrics`` are on)."""
    recording = config.recording
    if not (recording.enabled and recording.engine_metrics):
        yield []
        return
    import aiohttp

    directory = Path(recording.directory)
    directory.mkdir(parents=True, exist_ok=True)
    async with aiohttp.ClientSession() as session:
        candidates = []
        for upstream in config.upstreams:
            url = str(URL(upstream.base_url).origin() / "metrics")
            # Upstream names are letters, digits, '.', '_' and '-' (config checks): file-safe.
            path = gateway_metrics_path(directory, upstream.name)
            # With several workers each runs this: one of them scrapes (the file's lock).
            candidates.append(EngineScraper(url, path, session, shared=True))
        # Asked together: one after another, each upstream that does not answer would hold
        # the gateway's start for its timeout (a second each).
        answers = await asyncio.gather(*(scraper.probe() for scraper in candidates))
        scrapers = []
        for scraper, answered in zip(candidates, answers, strict=True):
            if answered:
                scrapers.append(scraper)
            else:
                log.info("engine metrics: %s does not answer; not scraped", shown_url(scraper.url))
        stop = asyncio.Event()
        tasks = [asyncio.create_task(s.run(stop)) for s in scrapers]
        try:
            yield scrapers
        finally:
            stop.set()
            if tasks:
                _, late = await asyncio.wait(tasks, timeout=STOP_GRACE_S)
                # A scrape still in flight (a slow engine) is cancelled, not left to run
                # on after its session closed (and destroyed, pending, with the loop).
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
