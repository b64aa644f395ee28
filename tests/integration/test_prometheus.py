"""Real monitoring: Prometheus scrapes the gateway during a bench, and the dashboard we ship.

The agreement asked for: ``histogram_quantile`` over the per-stream p99 histogram, computed by
Prometheus from what it scraped, falls in the bucket that holds the offline p99-of-p99 of the
timelines the gateway recorded (the same streams). The Grafana dashboard's queries name only
metrics the gateway exports and run on this Prometheus.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from steadystream import Outcome, Timeline, Where
from steadystream.bench import Bench, ClosedLoop, Endpoint, RunOptions, Workload, builtin_prompts
from steadystream.bench.cancel import CancelPoint, CancelPolicy
from steadystream.gateway import GatewayServer
from steadystream.gateway.export import GAP_BUCKETS
from steadystream.lab import LabServer
from steadystream.metrics import fleet_metrics, stream_table
from tests.support.gateway import MemorySink, gateway_config, get, upstream, wait_for
from tests.support.real_parts import ROOT, Child, prometheus

pytestmark = pytest.mark.integration

DASHBOARD = ROOT / "deploy" / "grafana" / "steadystream-gateway.json"
REQUESTS = 48
BOUNDS = (0.0, *GAP_BUCKETS, math.inf)


@dataclass
class Scraped:
    """A bench through the gateway, with Prometheus watching."""

    gateway_url: str
    prom: Child
    clients: list[Timeline]
    recorded: list[Timeline]  # the gateway's downstream edge of every request it served
    exposition: str


def query(prom: Child, expr: str) -> list[dict[str, Any]]:
    url = f"{prom.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def scalar(prom: Child, expr: str) -> float:
    (sample,) = query(prom, expr)
    return float(sample["value"][1])


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    sink = MemorySink()
    with (
        LabServer("mixed", seed=5) as lab,
        LabServer("steady", seed=5) as fallback,
        GatewayServer(
            gateway_config(
                upstream(lab, "lab", forward_headers=["X-Lab-Fault"]),
                upstream(fallback, "fallback", priority=1),
                watchdog={"first_token_timeout": "5s", "stall_timeout": "1s"},
                # the bench's cancellations reach the engine at once (no wait for a resume),
                # so the cancellation panels have this run's data
                resume={"grace": 0},
            ),
            recorder=sink,
        ) as gateway,
        prometheus(gateway.url.removeprefix("http://"), tmp_path_factory.mktemp("prom")) as prom,
    ):
        clients = asyncio.run(bench(gateway.base_url))
        served = len(clients) + 1  # and the one that failed over
        wait_for(
            lambda: len(sink.timelines) == 2 * served or None,
            what="the gateway to record every stream",
        )
        # Wait for a scrape that saw every stream.
        wait_for(
            lambda: scalar(prom, "sum(steadystream_streams_total)") == served or None,
            timeout=20,
            what="Prometheus to scrape the last streams",
        )
        status, body = get(gateway.url, "/metrics")
        assert status == 200
        recorded = [t for t in sink.timelines if t.where is Where.GATEWAY_DOWNSTREAM]
        yield Scraped(gateway.url, prom, clients, recorded, body.decode())


async def bench(base_url: str) -> list[Timeline]:
    # A failover (a stall on the first upstream) and a cancellation, so that every panel of
    # the dashboard has something to show.
    faulty = Endpoint(base_url, "lab", headers=(("X-Lab-Fault", "stall-after=3:forever"),))
    async with Bench(faulty, Workload(builtin_prompts(), max_tokens=20), lab_truth="off") as b:
        await b.run(ClosedLoop(1), RunOptions(max_requests=1))
    endpoint = Endpoint(base_url, "lab")
    workload = Workload(builtin_prompts(), max_tokens=60)
    cancel = CancelPolicy(0.1, CancelPoint(after_tokens=10))
    async with Bench(endpoint, workload, lab_truth="off") as b:
        result = await b.run(
            ClosedLoop(8), RunOptions(max_requests=REQUESTS, duration_ns=30 * 10**9, cancel=cancel)
        )
    return result.timelines


def bucket(value: float) -> int:
    """The index of the bucket that holds ``value`` (le semantics: value <= bound)."""
    return bisect.bisect_left(BOUNDS, value, lo=1)


def test_p99_of_p99_agrees_with_the_recorded_timelines(scraped: Scraped) -> None:
    prom = scraped.prom
    p99s = stream_table(scraped.recorded).column("gap_p99_s")
    per_stream = np.sort(p99s[~np.isnan(p99s)])
    offline = fleet_metrics(scraped.recorded).p99_of_p99_s
    assert offline is not None
    observed = scalar(prom, "sum(steadystream_stream_p99_gap_seconds_count{edge='downstream'})")
    assert observed == len(per_stream)  # one observation per stream with a gap
    from_prom = scalar(
        prom,
        "histogram_quantile(0.99, sum by (le) "
        "(steadystream_stream_p99_gap_seconds_bucket{edge='downstream'}))",
    )
    # Prometheus takes the stream at rank ceil(0.99 n) and interpolates inside its bucket;
    # numpy interpolates between the two ranks around 0.99 (n - 1). Both lie in the buckets
    # from the one holding the first to the one holding the second.
    at_rank = float(per_stream[math.ceil(0.99 * len(per_stream)) - 1])
    low, high = sorted((bucket(offline), bucket(at_rank)))
    assert BOUNDS[low - 1] <= from_prom <= BOUNDS[high], (
        from_prom,
        offline,
        BOUNDS[low - 1 : high + 1],
    )
    # The dashboard's rate() form, for the record: a series' first scrape is its baseline, so
    # streams that ended before it are not counted (docs/monitoring.md).
    rated = scalar(
        prom,
        "histogram_quantile(0.99, sum by (le) "
        "(rate(steadystream_stream_p99_gap_seconds_bucket{edge='downstream'}[5m])))",
    )
    print(
        f"\np99-of-p99: Prometheus {from_prom * 1e3:.2f} ms, offline {offline * 1e3:.2f} ms,"
        f" bucket ({BOUNDS[low - 1] * 1e3:g}, {BOUNDS[high] * 1e3:g}] ms,"
        f" {len(per_stream)} streams; rate() form {rated * 1e3:.2f} ms"
    )
    # The client saw the same streams a loopback hop later: the same bucket or the next one.
    # The same streams: the gateway's recordings of the client's complete ones. All of them
    # hold the cancelled ones and the one that failed over (a gap of a stall timeout, which
    # numpy's p99 interpolates towards), so their p99 of p99 is another population's.
    complete = [t for t in scraped.clients if t.outcome is Outcome.COMPLETE]
    ids = {t.stream_id for t in complete}
    same = [t for t in scraped.recorded if t.stream_id in ids]
    assert len(same) == len(complete) > 0
    client, gateway = fleet_metrics(complete).p99_of_p99_s, fleet_metrics(same).p99_of_p99_s
    assert client is not None
    assert gateway is not None
    assert abs(bucket(client) - bucket(gateway)) <= 1, (client, gateway)


# -- the Grafana dashboard ------------------------------------------------------------------------

_METRIC = re.compile(r"\bsteadystream_[a-z0-9_]+")
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"]) for panel in board["panels"] for target in panel["targets"]
    ]


def exported(exposition: str) -> set[str]:
    """Every series name the gateway's /metrics can carry, from its TYPE lines."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= {name + s for s in _HISTOGRAM_SUFFIXES} if kind == "histogram" else {name}
    return names


def grafana_variables(expr: str) -> str:
    """The query as Grafana sends it with every job, model and tenant selected."""
    return (
        expr.replace("$__rate_interval", "5m")
        .replace('"$job"', '".*"')
        .replace('"$model"', '".*"')
        .replace('"$tenant"', '".*"')
    )


def test_the_dashboard_has_the_headline_panels() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "steadystream-gateway"
    titles = " | ".join(p["title"] for p in board["panels"])
    for wanted in (
        "ITL band",
        "p99-of-p99",
        "worst gap",
        "goodput",
        "TTFT",
        "Stalls",
        "Failovers",
        "Cancellations",
    ):
        assert wanted in titles
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["targets"] and p["datasource"]["type"] == "prometheus" for p in board["panels"])


def test_the_dashboard_queries_only_what_the_gateway_exports(scraped: Scraped) -> None:
    names = exported(scraped.exposition)
    for title, expr in dashboard_queries():
        used = set(_METRIC.findall(expr))
        assert used, title
        assert used <= names, (title, used - names)


def test_every_dashboard_query_runs_and_shows_this_run(scraped: Scraped) -> None:
    empty = []
    for title, expr in dashboard_queries():
        if not query(scraped.prom, grafana_variables(expr)):
            empty.append(title)
    assert empty == [], f"panels with no data after a bench: {empty}"
