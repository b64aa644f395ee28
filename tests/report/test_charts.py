"""Chart helpers that compute something: the stall map's bar colours."""

from __future__ import annotations

import numpy as np

from steadystream.report.charts import gap_colorscale, gap_colours


def test_bar_colours_follow_the_gap_colour_scale() -> None:
    top = 800.0  # twice a 400 ms threshold: the scale's middle is the threshold
    stops = gap_colorscale()
    at_stops = np.array([stop * top for stop, _ in stops], dtype=np.float32)
    assert gap_colours(at_stops, top) == [colour for _, colour in stops]
    # Between two stops, each channel is interpolated: halfway from #fee08b to #f46d43.
    assert gap_colours(np.array([0.4 * top], dtype=np.float32), top) == ["#f9a667"]
    # Past the top, and undefined, clamp to the ends of the scale.
    beyond = gap_colours(np.array([5 * top, np.nan, -1.0], dtype=np.float32), top)
    assert beyond == [stops[-1][1], stops[0][1], stops[0][1]]


def test_bar_colours_are_strings_plotly_reads_without_warning() -> None:
    colours = gap_colours(np.array([20.0, 2000.0], dtype=np.float32), 800.0)
    assert all(isinstance(c, str) and len(c) == 7 and c.startswith("#") for c in colours)
