"""Text from the run (stream ids, label values, causes a file names) as a chart draws it."""

from __future__ import annotations

import html
from collections import Counter

__all__ = ["CHART_TEXT_LIMIT", "chart_labels", "chart_text"]

CHART_TEXT_LIMIT = 80
"""The most characters of one text from the run that a chart shows."""


def chart_text(text: str, limit: int = CHART_TEXT_LIMIT) -> str:
    """``text`` for a chart: shown as written, and at most ``limit`` characters long.

    plotly.js reads a subset of HTML in every text it draws (trace names, tick labels, hover
    text): ``<a href=...>`` in a stream id would be a link in the chart, ``style=`` would
    restyle it, ``<br>`` break it. Escaped, plotly shows the characters as written. A longer
    text keeps its head and its tail (where ids differ) around an ellipsis: a stream id of a
    megabyte would otherwise be copied into the page at every bar of its row.
    """
    if len(text) > limit:
        tail = limit // 4
        text = f"{text[: limit - tail - 1]}…{text[-tail:]}"
    return html.escape(text, quote=False)


def chart_labels(texts: list[str]) -> list[str]:
    """:func:`chart_text` of each, told apart: a label met again (one stream id at two
    vantage points, or two long ids cut alike) gets a suffix, ``#1``, ``#2``..."""
    shown = [chart_text(text) for text in texts]
    repeated = {k for k, v in Counter(shown).items() if v > 1}
    seen: Counter[str] = Counter()
    labels = []
    for label in shown:
        if label in repeated:
            seen[label] += 1
            label = f"{label} #{seen[label]}"
        labels.append(label)
    return labels
