"""What a `/metrics` scrape costs the streams of a gateway worker: how late its loop runs.

    python benchmarks/bench_metrics_scrape.py --models 1 10 100

A gateway's metrics with M model labels (each with both edges of every histogram, as a
stream of that model leaves them), in the form a worker of several keeps them (its own
snapshot file, summed at a scrape). A ticker on the event loop asks to wake every
millisecond while one scrape runs; its worst lateness is the gap every stream on that
worker would have seen. Two ways, side by side in one process:

- **on the loop**: the exposition made where the metrics live (``GatewayMetrics.exposition``,
  as every scrape was before the rendering moved to a thread);
- **render**: what ``/metrics`` does now (``GatewayMetrics.render``): the histograms copied
  on the loop, the snapshot, the sum and the text made on a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.shared_metrics import SharedMetrics

TICK_S = 0.001


def metrics_of(models: int, folder: Path) -> GatewayMetrics:
    metrics = GatewayMetrics(CollectorRegistry())
    rng = np.random.default_rng(0)
    for i in range(models):
        labels = (f"model-{i}", "chat", "", "lab")
        for edge in ("upstream", "downstream"):
            for histogram in (
                metrics.gap,
                metrics.stream_p99_gap,
                metrics.stream_max_gap,
                metrics.ttft,
                metrics.ttfb,
            ):
                histogram.observe((*labels, edge), rng.random(10))
        for histogram in (metrics.duration, metrics.output_tokens, metrics.added_latency):
            histogram.observe(labels, rng.random(10))
        metrics.streams.labels(*labels, "complete").inc()
    metrics.shared = SharedMetrics(metrics.registry, folder, view=metrics.view)
    return metrics


async def worst_lateness(scrape: Callable[[], Awaitable[bytes]]) -> tuple[float, float, int]:
    """(the loop's worst lateness, the scrape's own time, its bytes), in seconds."""
    late = 0.0
    running = True

    async def tick() -> None:
        nonlocal late
        while running:
            began = time.perf_counter()
            await asyncio.sleep(TICK_S)
            late = max(late, time.perf_counter() - began - TICK_S)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    late = 0.0
    began = time.perf_counter()
    body = await scrape()
    took = time.perf_counter() - began
    running = False
    await ticker
    return late, took, len(body)


async def main(models: list[int], rounds: int) -> None:
    for count in models:
        with tempfile.TemporaryDirectory() as folder:
            metrics = metrics_of(count, Path(folder))

            async def on_the_loop(metrics: GatewayMetrics = metrics) -> bytes:
                return metrics.exposition()

            for _ in range(rounds):
                for way, scrape in (("on the loop", on_the_loop), ("render", metrics.render)):
                    late, took, size = await worst_lateness(scrape)
                    print(
                        json.dumps(
                            {
                                "models": count,
                                "way": way,
                                "loop_late_ms": round(late * 1e3, 1),
                                "scrape_ms": round(took * 1e3, 1),
                                "bytes": size,
                            }
                        )
                    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.models, args.rounds))
