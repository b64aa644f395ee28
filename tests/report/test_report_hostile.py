"""Hostile runs against what people read: ``report``'s page and ``explain``'s outputs.

Stream ids, labels and causes come from a file anyone can write: they must never run, link
or restyle anything in the page, never blow up its size, and an output path must never
replace a file that is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from steadystream import Outcome, Timeline
from steadystream.attribution import ATTRIBUTABLE
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.report import build_report, render_html
from steadystream.report._text import chart_labels, chart_text
from tests.support.report import steady
from tests.support.timelines import make_timeline

_register()
runner = CliRunner()

PAYLOADS = (
    "</script><script>window.pwned=1</script>",
    '"><img src=x onerror="window.pwned=2">',
    '<a href="https://example.com/">click</a>',
    "javascript:window.pwned=3",
    "{{7*7}}",
    "line\u2028sep\u2029para",
    "</style><b>bold</b><!--",
    "=cmd|' /C calc'!A0",
)
# What a page or a figure must never hold as written: markup a browser or plotly would read.
RAW = ("<script>window", "<img", '<a href="https:', "</style><b>", "<!--", "<b>bold")


def _hostile_run() -> list[Timeline]:
    run = []
    for i, payload in enumerate(PAYLOADS):
        times = [100.0 + 20 * k for k in range(40)] + [2000.0 + 20 * k for k in range(40)]
        labels = {"model": payload, "route": payload, "tenant": payload}
        run.append(make_timeline(times, stream_id=f"{payload}{i}", labels=labels))
    failed = make_timeline([100.0, 2600.0], stream_id=PAYLOADS[0], outcome=Outcome.ERROR)
    failed.error = PAYLOADS[1]
    return [*run, failed]


def _page_without_plotly(page: str) -> str:
    plotly = get_plotlyjs()
    assert page.count(plotly) == 1
    return page.replace(plotly, "")


def _texts(value: Any) -> list[str]:
    """Every string in a figure's JSON (names, tick labels, hover texts, categories)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


# -- the page ---------------------------------------------------------------------------------


def test_hostile_texts_through_the_cli_never_reach_the_page_as_markup(tmp_path: Path) -> None:
    run, out = tmp_path / "run.jsonl", tmp_path / "report.html"
    write_jsonl(run, _hostile_run())
    result = runner.invoke(app, ["report", str(run), "-o", str(out), "--title", PAYLOADS[0]])
    assert result.exit_code == 0, result.output
    page = _page_without_plotly(out.read_text())
    for raw in RAW:
        assert raw not in page, raw
    assert page.count("<script>") == 2  # plotly.js and the plotting script, nothing else
    assert page.count("</style>") == 1
    script = page[page.rindex("<script>") :]
    assert "</" not in script[: -len("</script></body></html>")]
    assert "\u2028" not in script
    assert "\u2029" not in script


def test_plotly_markup_in_ids_and_labels_is_shown_as_written() -> None:
    # plotly.js reads <a href>, style= and <br> in every text it draws: a stream id holding
    # them became a link (or restyled the chart) in the stall map, the worst streams' legend
    # and the TTFT groups.
    report = build_report(_hostile_run())
    for chart in report.charts:
        figure = orjson.loads(chart.figure.to_json())
        texts = [t for t in _texts(figure["data"]) if "<" in t or ">" in t]
        hovers = [t for t in texts if "%{" in t]  # (our own templates: <br>, <extra>)
        assert [t for t in texts if t not in hovers and "<b>" not in t] == [], chart.id
    rows = report.chart("stall-map").figure.layout.yaxis.categoryarray
    assert "&lt;a href=&quot;" not in "".join(rows)  # quotes stay as written for plotly
    assert '&lt;a href="https://example.com/"&gt;click&lt;/a&gt;2' in rows


def test_causes_drawn_over_stalls_follow_escaped_rows() -> None:
    # The stall causes are matched to the map's rows by label: an escaped id keeps its stalls.
    report = build_report([steady("<i>x</i>", [20.0, 900.0, 20.0]), steady("ok", [20.0])])
    caused = [t for t in report.chart("stall-map").figure.data if t.name in ATTRIBUTABLE]
    assert [y for t in caused for y in t.y] == ["&lt;i&gt;x&lt;/i&gt;"]
    assert "The 1 stalls shown carry" in report.chart("stall-map").how_to_read


def test_long_ids_do_not_grow_the_page() -> None:
    # 60 streams of 20 kB ids with 20 gaps each: every gap's bar carried its row's whole
    # id (25 MB of page from a 1.3 MB run; 200 such streams made 205 MB and 1.3 GB of memory).
    run = [steady(f"{i:03d}" + "y" * 20_000, [20.0] * 20) for i in range(60)]
    page = _page_without_plotly(render_html(build_report(run)))
    assert len(page.encode()) < 1_000_000
    rows = build_report(run[:3]).chart("stall-map").figure.layout.yaxis.categoryarray
    assert len(set(rows)) == 3  # cut alike in the middle, told apart by their tails
    assert all(len(row) <= 80 for row in rows)


def test_a_megabyte_id_is_cut_in_every_chart() -> None:
    huge = "x" * 1_000_000
    report = build_report([steady(huge, [20.0, 900.0]), steady("ok", [20.0])])
    for chart in report.charts:
        assert max(map(len, _texts(orjson.loads(chart.figure.to_json()))), default=0) < 2_000


def test_stall_cause_bars_are_bounded() -> None:
    # Every stall of the rows shown was one bar and one hover text: 200 streams of 400
    # stalls made a 30 MB page. The longest 2,000 are coloured, and the chart says so.
    run = [steady(f"s{i}", [500.0] * 50) for i in range(50)]
    chart = build_report(run).chart("stall-map")
    caused = [t for t in chart.figure.data if t.name in ATTRIBUTABLE]
    assert sum(len(t.x) for t in caused) == 2_000
    assert "The 2,000 longest stalls shown" in chart.how_to_read
    assert "The 500 shorter ones are not coloured." in chart.how_to_read


def test_chart_text_cuts_then_escapes() -> None:
    assert chart_text("a<b>&c") == "a&lt;b&gt;&amp;c"
    cut = chart_text("<" * 100)
    assert "…" in cut
    assert "<" not in cut
    assert chart_labels(["a" * 200 + "1", "a" * 200 + "1", "b"]) == [
        chart_text("a" * 200 + "1") + " #1",
        chart_text("a" * 200 + "1") + " #2",
        "b",
    ]


# -- runs with nothing to spread --------------------------------------------------------------


@pytest.mark.parametrize(
    "run",
    [
        pytest.param([], id="no-streams"),
        pytest.param(
            [make_timeline([], stream_id=f"f{i}", outcome=Outcome.ERROR) for i in range(3)],
            id="all-failed",
        ),
        pytest.param([steady(f"s{i}", [20.0] * 30) for i in range(20)], id="no-spread"),
        pytest.param(
            [make_timeline([100.0] * 20, stream_id=f"z{i}") for i in range(3)], id="zero-gaps"
        ),
        pytest.param(
            [
                make_timeline([100.0, 120.0], stream_id=f"l{i}", labels={"model": f"m{i}"})
                for i in range(10_000)
            ],
            id="10k-labels",
        ),
    ],
)
def test_degenerate_runs_report(run: list[Timeline]) -> None:
    report = build_report(run)
    page = render_html(report)
    assert len(report.charts) == 6
    assert len(page.encode()) < 6_000_000
    assert "NaN" not in _page_without_plotly(page).split("<script>")[0]


def test_a_start_outside_the_calendar_is_reported() -> None:
    # started_at 1e20 (a file's nanoseconds taken for seconds): OverflowError out of
    # build_report, a traceback from `steadystream report`.
    run = [steady("a", [20.0, 20.0])]
    run[0].started_at = 1e20
    lines = build_report(run).run
    assert any("Started at unix time 1e+20 s (not a date)" in line for line in lines)


# -- where outputs go -------------------------------------------------------------------------


def _one_line_error(output: str) -> None:
    assert "Traceback" not in output


def test_report_output_that_is_an_input_is_refused(tmp_path: Path) -> None:
    run, base = tmp_path / "run.jsonl", tmp_path / "base.jsonl"
    write_jsonl(run, [steady("a", [20.0, 900.0])])
    write_jsonl(base, [steady("b", [20.0])])
    before = run.read_bytes(), base.read_bytes()
    for output in (run, tmp_path / "." / "base.jsonl"):
        result = runner.invoke(
            app, ["report", str(run), "--baseline", str(base), "-o", str(output)]
        )
        assert result.exit_code == 2, result.output
        assert "a file the report reads" in result.output
        _one_line_error(result.output)
    assert (run.read_bytes(), base.read_bytes()) == before


@pytest.mark.parametrize("where", ["folder", "missing-folder"])
def test_report_output_in_no_file_is_one_line(tmp_path: Path, where: str) -> None:
    run = tmp_path / "run.jsonl"
    write_jsonl(run, [steady("a", [20.0])])
    output = tmp_path if where == "folder" else tmp_path / "no" / "r.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(output)])
    assert result.exit_code == 2
    assert "--output" in result.output
    _one_line_error(result.output)


def test_report_images_path_that_is_a_file_is_refused_first(tmp_path: Path) -> None:
    # It was a FileExistsError traceback from mkdir, after the report was written.
    run, out = tmp_path / "run.jsonl", tmp_path / "r.html"
    write_jsonl(run, [steady("a", [20.0])])
    result = runner.invoke(app, ["report", str(run), "-o", str(out), "--images", str(run)])
    assert result.exit_code == 2
    assert "--images" in result.output
    assert "not a folder" in result.output
    assert not out.exists()


def test_explain_prometheus_file_that_is_an_input_is_refused(tmp_path: Path) -> None:
    # `explain run.jsonl --prometheus run.jsonl` replaced the run with the totals.
    run = tmp_path / "run.jsonl"
    write_jsonl(run, [steady("a", [20.0, 900.0])])
    before = run.read_bytes()
    result = runner.invoke(app, ["explain", str(run), "--prometheus", str(run)])
    assert result.exit_code == 2
    assert "is a file explain reads" in result.output
    assert run.read_bytes() == before
    prom = tmp_path / "stalls.prom"
    assert runner.invoke(app, ["explain", str(run), "--prometheus", str(prom)]).exit_code == 0
    assert re.search(r'steadystream_stalls_total\{cause="\w', prom.read_text())


def test_explain_json_of_hostile_ids_is_valid(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    write_jsonl(run, _hostile_run())
    result = runner.invoke(app, ["explain", str(run), "--json"])
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.stdout)
    ids = {stall["stream_id"] for stall in payload["stalls"]}
    assert f"{PAYLOADS[5]}5" in ids  # U+2028 kept as it was written
