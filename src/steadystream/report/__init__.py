"""The HTML report of a run: headline cards, findings and charts in one offline file.

    >>> report = build_report(timelines, baseline=before)
    >>> write_report(report, "report.html")
    >>> from steadystream.report.images import write_images
    >>> write_images(report, "charts/")        # PNG and SVG per chart; needs Chromium
    >>> find_chromium()                         # the Chromium it would use, or None

docs/report.md explains how to read each chart.
"""

from steadystream.report._browser import find_chromium
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
    "find_chromium",
    "headline_cards",
    "render_html",
    "write_report",
]
