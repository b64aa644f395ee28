"""One ``/metrics`` for every worker of a gateway: each publishes a snapshot, any one sums them.

With ``server.workers`` above one, a scrape reaches whichever worker the kernel hands the
connection to, and each worker holds only its own streams' numbers. So every worker writes a
snapshot of its registry to a folder the workers share (at most once a second while it
serves, and on each scrape it answers), and the worker that answers a scrape sums all of
them, as prometheus_client's multiprocess mode does for its own metric types:

- counters and histograms (buckets, sums, counts) add up over every worker that ever ran,
  so a replaced worker's streams still count and nothing goes backwards;
- gauges (streams in flight) add up over the workers that are alive (snapshots a live
  worker refreshed within :data:`LIVE_S`), so a worker that died takes its gauge with it;
- ``_created`` stamps take the earliest.

The gateway's histograms are its own (:mod:`steadystream._histogram`), which
prometheus_client's multiprocess mode cannot see; snapshots of whatever the registry
collects cover them and every future metric alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["LIVE_S", "PUBLISH_EVERY_S", "SharedMetrics"]

PUBLISH_EVERY_S = 1.0
LIVE_S = 5.0
"""A worker whose snapshot is older than this is gone: its gauges no longer count."""


class SharedMetrics:
    """The snapshot of one worker's ``registry`` in ``folder``, and the sum of all of them."""

    def __init__(self, registry: CollectorRegistry, folder: Path) -> None:
        self.registry = registry
        self.folder = folder
        self.path = folder / f"worker-{os.getpid()}-{time.time_ns()}.json"
        self._published = 0.0

    def publish(self) -> None:
        """Write this worker's snapshot (atomically: a reader never sees half a file)."""
        families = [
            {
                "name": family.name,
                "help": family.documentation,
                "type": family.type,
                "samples": [[s.name, s.labels, s.value] for s in family.samples],
            }
            for family in self.registry.collect()
        ]
        temporary = self.path.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps(families))
        temporary.replace(self.path)
        self._published = time.monotonic()

    def publish_if_due(self) -> None:
        if time.monotonic() - self._published >= PUBLISH_EVERY_S:
            self.publish()

    def exposition(self) -> bytes:
        """Every worker's metrics summed, in Prometheus' text format."""
        self.publish()
        merged = CollectorRegistry(auto_describe=False)
        merged.register(_Merged(self.folder))
        return generate_latest(merged)


class _Merged(Collector):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for path in sorted(self.folder.glob("worker-*.json")):
            try:
                live = now - path.stat().st_mtime <= LIVE_S
                snapshot = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue  # a worker's file replaced under us: the next scrape has it
            for family in snapshot:
                name, kind = family["name"], family["type"]
                if kind == "gauge" and not live:
                    continue
                families.setdefault(name, Metric(name, family["help"], kind))
                sums = values.setdefault(name, {})
                for sample_name, labels, value in family["samples"]:
                    key = (sample_name, tuple(sorted(labels.items())))
                    if sample_name.endswith("_created"):
                        sums[key] = min(sums.get(key, value), value)
                    else:
                        sums[key] = sums.get(key, 0.0) + value
        for name, family in families.items():
            for (sample_name, labels), value in values[name].items():
                family.add_sample(sample_name, dict(labels), value)
            yield family
