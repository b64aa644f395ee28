"""docs/monitoring.md#opentelemetry names exactly what the code exports."""

from __future__ import annotations

import re

from steadystream import Outcome, Where
from steadystream.otel import conventions, gateway_stream
from tests.support.otel import CALL, edge
from tests.support.real_parts import ROOT

SECTION = (ROOT / "docs" / "monitoring.md").read_text().split("## OpenTelemetry", 1)[1]
METRIC_NAMES = {*conventions.METRICS, "steadystream.otel.dropped_spans"}


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    table = SECTION.split("### The metrics", 1)[1].split("### ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", table, re.MULTILINE))
    assert documented == METRIC_NAMES
    for name, spec in conventions.METRICS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"| {spec.unit} |" in row


def test_the_documented_span_is_the_one_made() -> None:
    made: set[str] = {"gen_ai.token.type"}  # (a metric attribute)
    for outcome in (Outcome.COMPLETE, Outcome.ERROR):
        up = edge(Where.GATEWAY_UPSTREAM, [100, 120, 140, 600, 620], outcome)
        down = edge(Where.GATEWAY_DOWNSTREAM, [101, 121, 141, 701, 721], outcome)
        span, _ = gateway_stream(up, down, CALL)
        made |= set(span.attributes)
        for event in span.events:
            made |= {event.name, *event.attributes}
    text = SECTION.split("### The span", 1)[1].split("### The metrics", 1)[0]
    documented = set(re.findall(r"`((?:gen_ai|steadystream|server|error)\.[a-z0-9_.]+)`", text))
    assert documented == made - {"gen_ai.token.type"}
