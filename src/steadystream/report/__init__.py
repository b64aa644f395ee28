"""The HTML report of a run: headline cards, findings and charts in one offline file.

    >>> report = build_report(timelines, baseline=before)
    >>> write_report(report, "report.html")
    >>> from steadystream.report.images import write_images
    >>> write_images(report, "charts/")        # PNG and SVG per chart; needs Chromium

docs/report.md explains how to read each chart.
"""

from steadystream.report.build import CHART_IDS, build_report
from steadystream.report.cards import Card, headline_cards
from steadystream.report.html import render_html, write_report
from steadystream.report.model import Chart, Report, ReportFinding, WhatIfTable

__all__ = [
    "CHART_IDS",
    "Card",
    "Chart",
    "Report",
    "ReportFinding",
    "WhatIfTable",
    "build_report",
    "headline_cards",
    "render_html",
    "write_report",
]
