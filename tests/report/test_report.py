"""Report content from known runs: cards, charts, findings, what-if, and the size bound."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from steadystream import Timeline
from steadystream.attribution import explain
from steadystream.findings import find
from steadystream.metrics import MetricConfig, fleet_metrics, stream_table
from steadystream.report import CHART_IDS, Report, build_report, render_html
from steadystream.report.cards import Card
from steadystream.shaping import parse_spec, what_if
from tests.support.report import ROOT, steady
from tests.support.timelines import make_timeline, reasoning_timeline

PLOTLY_JS = get_plotlyjs()
SIZE_BOUND = 10_000_000  # bytes: a report of any run stays this small to open


@pytest.fixture(scope="module")
def report(sample_run: list[Timeline]) -> Report:
    return build_report(sample_run, sources=["sample-run.jsonl"])


@pytest.fixture(scope="module")
def page(report: Report) -> str:
    return render_html(report)


def _without_plotly(page: str) -> str:
    assert page.count(PLOTLY_JS) == 1, "plotly.js must be inlined exactly once"
    return page.replace(PLOTLY_JS, "")


def test_cards_carry_the_runs_numbers(sample_run: list[Timeline], report: Report) -> None:
    fleet = fleet_metrics(sample_run)
    for card in report.cards:
        assert card.value == getattr(fleet, card.key), card.key
    shown = {card.key: card.shown for card in report.cards}
    # The sample run: six streams freeze for 2 s once, 24 of 30 are smooth.
    assert shown["p99_of_worst_gap_s"] == "2.00s"
    assert shown["goodput"] == "80.0%"
    assert shown["stalls_per_1k_tokens"] == "1.00"
    assert shown["ttft_p50_s"] == "180.0ms"


def test_cards_are_on_the_page(report: Report, page: str) -> None:
    for card in report.cards:
        found = re.search(rf'id="card-{card.key}" href="#([\w-]+)">.*?class="value">([^<]*)<', page)
        assert found is not None, card.key
        assert found.group(1) == card.chart
        assert found.group(1) in CHART_IDS
        assert found.group(2) == card.shown


def test_every_chart_is_present(report: Report, page: str) -> None:
    assert [chart.id for chart in report.charts] == list(CHART_IDS)
    for chart_id in CHART_IDS:
        assert f'<section class="panel chart" id="{chart_id}">' in page
        assert f'<div class="plot" id="plot-{chart_id}"></div>' in page
        assert f'{{"id":"{chart_id}","figure":' in page
        assert report.chart(chart_id).figure.data, chart_id  # something is drawn
    assert "Plotly.newPlot" in page


def test_page_loads_nothing_from_a_network(page: str) -> None:
    ours = _without_plotly(page)
    assert "http://" not in ours
    assert "https://" not in ours
    # Nothing else is fetched either: no external script, style, image or font.
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", ours)
    assert "url(" not in ours
    assert "@import" not in ours


def test_findings_point_at_their_charts(
    sample_run: list[Timeline], report: Report, page: str
) -> None:
    config = MetricConfig()
    table = stream_table(sample_run, config)
    explained = explain(sample_run, stall_threshold_ns=config.stall_threshold_ns)
    codes = [f.code for f in find(table, fleet_metrics(table, config), config, explained)]
    assert [f.code for f in report.findings] == codes
    assert codes[0] == "stall-cause"  # the dominant cause of its stalls comes first
    assert {"p99-hides-freezes", "single-token-chunks", "head-burst"} <= set(codes)
    for finding in report.findings:
        assert finding.chart in CHART_IDS
        assert f'<li id="finding-{finding.code}">' in page
        assert f'href="#{finding.chart}"' in page
        # The chart repeats the finding and links back to it.
        section = page[page.index(f'id="{finding.chart}"') :]
        assert f'href="#finding-{finding.code}"' in section[: section.index("</section>")]


def test_run_description_says_what_was_measured(report: Report) -> None:
    text = " ".join(report.run)
    assert "30 streams from sample-run.jsonl" in text
    assert "usage-one-per-event 24" in text  # every report says how tokens were counted
    assert "Stall threshold 400.0ms" in text


def test_baseline_changes(sample_run: list[Timeline]) -> None:
    smooth = [t for t in sample_run if not t.stream_id.startswith("paused")]
    report = build_report(sample_run, baseline=smooth, baseline_sources=["smooth.jsonl"])
    before = fleet_metrics(smooth)
    assert report.baseline == before
    cards: dict[str, Card] = {card.key: card for card in report.cards}
    for key, card in cards.items():
        assert card.baseline == getattr(before, key)
    worst = cards["p99_of_worst_gap_s"]
    assert worst.change == pytest.approx(worst.value - before.p99_of_worst_gap_s)
    assert worst.verdict == "worse"
    assert cards["goodput"].change == pytest.approx(0.8 - 1.0)
    assert cards["goodput"].verdict == "worse"
    assert cards["p50_of_p99_s"].verdict == "better"  # the paused streams tick at 10 ms
    page = render_html(report)
    assert 'class="card worse" id="card-p99_of_worst_gap_s"' in page
    assert "baseline 100.0%<br>−20.0 pts · worse" in page
    assert "24 streams from smooth.jsonl" in page
    assert '"name":"baseline worst gap"' in page  # the CDFs draw the baseline too


def test_one_stream(tmp_path: Path) -> None:
    report = build_report([steady("only", [20.0] * 40 + [700.0] + [20.0] * 10)])
    assert report.fleet.streams == 1
    assert report.chart("worst-streams").title == "The 1 worst streams"
    cards = {card.key: card.shown for card in report.cards}
    assert cards["p99_of_worst_gap_s"] == "700.0ms"
    page = render_html(report)
    assert all(f'id="plot-{chart_id}"' in page for chart_id in CHART_IDS)


def test_ttfr_is_shown_apart_from_ttft_where_streams_reasoned(report: Report) -> None:
    assert "reasoned" not in report.chart("ttft").subtitle
    assert "ttfr_p50_s" not in {card.key for card in report.cards}
    runs = [
        reasoning_timeline([250.0], [1500.0 + 20 * j for j in range(5)], stream_id="thinker"),
        steady("plain", [20.0] * 5),
    ]
    reasoned = build_report(runs)
    cards = {card.key: card.shown for card in reasoned.cards}
    assert cards["ttfr_p50_s"] == "250.0ms"
    assert cards["ttft_p50_s"] == "800.0ms"  # the answers' first tokens: 100 ms and 1.5 s
    subtitle = reasoned.chart("ttft").subtitle
    assert "1 of 2 streams reasoned" in subtitle
    assert "p50 250.0ms" in subtitle
    page = render_html(reasoned)
    assert 'id="card-ttfr_p50_s" href="#ttft"' in page


def test_streams_without_gaps(tmp_path: Path) -> None:
    report = build_report([make_timeline([100.0], stream_id="one-token")])
    assert {card.key: card.shown for card in report.cards}["p99_of_worst_gap_s"] == "—"
    page = render_html(report)
    assert page.count("no gaps: no stream delivered more than one chunk") == 3


def test_stream_ids_cannot_break_the_page() -> None:
    hostile = steady('<!--<script></script><script>window.pwned=1</script><b x="', [20.0, 900.0])
    page = _without_plotly(render_html(build_report([hostile])))
    assert "<script>window.pwned" not in page
    assert page.count("<script>") == 2  # plotly.js and our plotting script, nothing else


def test_whatif_table(sample_run: list[Timeline]) -> None:
    result = what_if(sample_run[:10], [parse_spec("leaky"), parse_spec("rechunk")])
    report = build_report(sample_run[:10], whatif=result)
    assert report.whatif is not None
    rows = report.whatif.rows
    assert rows[0][0] == "as recorded"
    assert len(rows) == 3
    assert rows[1][0].startswith("leaky")
    assert any("(best)" in row[0] for row in rows[1:])
    assert rows[0][6] == f"{result.before.stall_count:,}"
    page = render_html(report)
    assert '<section class="panel" id="whatif">' in page
    assert "<td>as recorded</td>" in page


def test_large_runs_are_summarised_and_stay_small() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _synthetic import synthetic_timelines
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    # 100,000 streams take ~15 s and 3 GB here; 20,000 show the same bound: the chart data
    # does not grow with the run.
    sizes = {}
    for streams in (2_000, 20_000):
        report = build_report(synthetic_timelines(streams, 120, seed=1))
        page = render_html(report)
        assert len(page.encode()) < SIZE_BOUND
        sizes[streams] = len(_without_plotly(page).encode())
        assert "showing 200 of" in report.chart("stall-map").subtitle
        assert "summarised in" in report.chart("stall-map").subtitle
    assert sizes[20_000] < 2_000_000
    assert sizes[20_000] < 1.25 * sizes[2_000]


def test_public_names_exist() -> None:
    import steadystream.report as package

    assert all(hasattr(package, name) for name in package.__all__)
    assert package.__all__ == sorted(package.__all__)


def test_a_gateway_recording_is_reported_once_per_request() -> None:
    # Both edges of each request (and one request seen upstream only): the cards count
    # requests, as analyze and explain do, and say which vantage point they show.
    from steadystream import Where

    up, down = Where.GATEWAY_UPSTREAM, Where.GATEWAY_DOWNSTREAM
    run = [
        make_timeline([20.0] * 30, stream_id=name, where=where)
        for name in ("a", "b", "c")
        for where in (up, down)
    ]
    run.append(make_timeline([20.0] * 30, stream_id="d", where=up))
    report = build_report(run, baseline=run[:4])
    assert report.fleet.streams == 4
    assert report.baseline is not None
    assert report.baseline.streams == 2
    assert any("gateway-downstream" in line and "left out" in line for line in report.run)


def test_two_files_reusing_an_id_hold_two_streams_in_the_report() -> None:
    # Two gateway runs that number their streams alike: the first file holds a request's
    # upstream edge only, the second both edges of its own request of the same id.
    from steadystream import Where

    up, down = Where.GATEWAY_UPSTREAM, Where.GATEWAY_DOWNSTREAM
    run = [make_timeline([20.0] * 30, stream_id="RUN-000001", where=w) for w in (up, up, down)]
    assert build_report(run).fleet.streams == 1  # as one file: one stream, seen thrice
    assert build_report(run, files=[0, 1, 1]).fleet.streams == 2
    report = build_report(run, baseline=run, baseline_files=[0, 1, 1])
    assert report.baseline is not None
    assert report.baseline.streams == 2
