"""Render a :class:`Report` as one self-contained HTML file that works offline.

plotly.js is inlined once, in the head; each chart is a div filled by ``Plotly.newPlot``
from the figure's JSON. The page loads nothing: no script, style, font or image comes from
a network, so it opens from disk on a machine without internet. ``window.steadystreamReady``
is a promise that settles when every chart is drawn (tests and image export wait on it).
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from steadystream.__about__ import __version__
from steadystream._replace import replaced
from steadystream.report.cards import Card
from steadystream.report.model import Chart, Report, ReportFinding, WhatIfTable

__all__ = ["PLOT_CONFIG", "render_html", "write_report"]

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showLink": False}

_STYLE = """
:root { --ink: #1d2733; --muted: #5c6b7a; --line: #dfe5eb; --paper: #f6f8fa;
  --better: #1a7f37; --worse: #c62828; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: var(--paper); }
main { max-width: 1240px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 19px; margin: 0 0 2px; }
.run p { margin: 2px 0; color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr));
  gap: 12px; margin: 20px 0; }
.card { display: block; background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: 12px 14px; color: inherit; text-decoration: none; border-top: 4px solid #9fb3c8; }
.card:hover { border-color: #9fb3c8; }
.card .label { font-size: 13.5px; color: var(--muted); font-weight: 600; }
.card .value { font-size: 28px; font-weight: 650; margin: 2px 0; }
.card .note { font-size: 12.5px; color: var(--muted); }
.card .change { font-size: 13px; margin-top: 6px; }
.card.better { border-top-color: var(--better); } .card.better .change { color: var(--better); }
.card.worse { border-top-color: var(--worse); } .card.worse .change { color: var(--worse); }
section.panel { background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: 16px 18px; margin: 18px 0; }
.subtitle { color: var(--muted); margin: 0 0 4px; font-size: 13.5px; }
.how { margin: 4px 0 8px; font-size: 14px; }
.findings li { margin: 6px 0; }
.findings code, .pointer code { font-size: 12.5px; background: var(--paper); padding: 1px 4px;
  border-radius: 3px; }
.pointer { border-left: 3px solid #e0a800; background: #fffbea; padding: 6px 10px;
  margin: 6px 0; font-size: 14px; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: right; }
th:first-child, td:first-child { text-align: left; }
footer { color: var(--muted); font-size: 13px; margin-top: 28px; }
.plot { margin-top: 28px; }
.plot .modebar-container { top: -28px !important; }
"""


def write_report(report: Report, path: str | os.PathLike[str]) -> int:
    """Write the report's HTML to ``path`` and return its size in bytes."""
    data = render_html(report).encode()
    with replaced(os.fspath(path)) as target:  # (a failed write keeps the report there)
        Path(target).write_bytes(data)
    return len(data)


def render_html(report: Report) -> str:
    """The whole page as one string."""
    from plotly.offline import get_plotlyjs

    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}</title>",
        f"<style>{_STYLE}</style>",
        f"<script>{get_plotlyjs()}</script>",
        "</head><body><main>",
        f'<header class="run" id="run"><h1>{_e(report.title)}</h1>',
        *(f"<p>{_e(line)}</p>" for line in report.run),
        "</header>",
        '<div class="cards" id="cards">',
        *(_card(card, compare=report.baseline is not None) for card in report.cards),
        "</div>",
        _findings(report.findings),
        _edges(report.edges) if report.edges is not None else "",
        *(_chart(chart, report.findings) for chart in report.charts),
        _whatif(report.whatif) if report.whatif is not None else "",
        f"<footer>Made with steadystream {_e(__version__)}. Every metric is defined in"
        " docs/metrics.md; docs/report.md explains how to read each chart.</footer>",
        "</main>",
        _plot_script(report.charts),
        "</body></html>",
    ]
    return "\n".join(part for part in parts if part)


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _card(card: Card, *, compare: bool) -> str:
    verdict = card.verdict
    change = ""
    if compare:
        said = card.change_shown
        if verdict is not None and said != "no change":
            said += f" · {verdict}"
        change = f'<div class="change">baseline {_e(card.baseline_shown)}<br>{_e(said)}</div>'
    classes = "card" if verdict in (None, "same") else f"card {verdict}"
    return (
        f'<a class="{classes}" id="card-{_e(card.key)}" href="#{_e(card.chart)}">'
        f'<div class="label">{_e(card.label)}</div>'
        f'<div class="value">{_e(card.shown)}</div>'
        f'<div class="note">{_e(card.note)}</div>{change}</a>'
    )


def _findings(findings: list[ReportFinding]) -> str:
    if not findings:
        return (
            '<section class="panel findings" id="findings"><h2>Findings</h2>'
            "<p>Nothing stands out: no finding applies to this run.</p></section>"
        )
    items = []
    for f in findings:
        target = f' <a href="#{_e(f.chart)}">see the chart</a>' if f.chart else ""
        items.append(
            f'<li id="finding-{_e(f.code)}"><code>{_e(f.code)}</code> {_e(f.message)}{target}</li>'
        )
    return (
        '<section class="panel findings" id="findings"><h2>Findings</h2><ul>'
        + "".join(items)
        + "</ul></section>"
    )


def _chart(chart: Chart, findings: list[ReportFinding]) -> str:
    pointers = "".join(
        f'<div class="pointer"><a href="#finding-{_e(f.code)}"><code>{_e(f.code)}</code></a>'
        f" {_e(f.message)}</div>"
        for f in findings
        if f.chart == chart.id
    )
    return (
        f'<section class="panel chart" id="{_e(chart.id)}"><h2>{_e(chart.title)}</h2>'
        f'<p class="subtitle">{_e(chart.subtitle)}</p><p class="how">{_e(chart.how_to_read)}</p>'
        f'{pointers}<div class="plot" id="plot-{_e(chart.id)}"></div></section>'
    )


def _whatif(table: WhatIfTable) -> str:
    return _table(table, "whatif", "What if the streams were paced")


def _edges(table: WhatIfTable) -> str:
    return _table(table, "edges", "Client and glass edges: what the browser added")


def _table(table: WhatIfTable, section_id: str, title: str) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in table.rows
    )
    return (
        f'<section class="panel" id="{section_id}"><h2>{_e(title)}</h2>'
        f'<p class="subtitle">{_e(table.note)}</p>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
    )


def _plot_script(chart_list: list[Chart]) -> str:
    import orjson
    import plotly.io as pio

    figures = ",".join(
        f'{{"id":{orjson.dumps(c.id).decode()},"figure":{pio.to_json(c.figure, validate=False)}}}'
        for c in chart_list
    )
    # "</script" or "<!--" inside a script would end or derail it (a stream id can hold
    # anything). "<" only ever occurs inside JSON strings, where \u003c reads back the same.
    figures = figures.replace("<", "\\u003c")
    config = orjson.dumps(PLOT_CONFIG).decode()
    return (
        "<script>\n(function () {\n"
        f"  var config = {config};\n"
        f"  var figures = [{figures}];\n"
        "  window.steadystreamReady = Promise.all(figures.map(function (f) {\n"
        '    return Plotly.newPlot("plot-" + f.id, f.figure.data, f.figure.layout, config);\n'
        "  }));\n"
        "})();\n</script>"
    )
