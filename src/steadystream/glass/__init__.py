"""The glass edge: when tokens reach a page and when they reach the screen.

- ``probe.js``, served at ``/steadystream/glass.js``: the page-side probe (docs/glass.md);
- :mod:`~steadystream.glass.intake`: what the probe posts, checked, as timelines;
- :mod:`~steadystream.glass.routes`: the probe's two routes for the gateway and the replay;
- :mod:`~steadystream.glass.tokens`, :mod:`~steadystream.glass.once`,
  :mod:`~steadystream.glass.budget`: on the gateway, a report binds to the answer it reports
  on (a token, used once) and keeps to its client's budget;
- :mod:`~steadystream.glass.recording`: reports on disk, in files and a byte budget of their own;
- :mod:`~steadystream.glass.edges`: what the browser added, client edge against glass edge;
- :mod:`~steadystream.glass.harness`: drive a page in headless Chromium over replays.
"""

from __future__ import annotations

from steadystream.glass.intake import GLASS_SCHEMA, GlassLimits, GlassReport, parse_report
from steadystream.glass.routes import INTAKE_PATH, PROBE_PATH, glass_routes, probe_source

__all__ = [
    "GLASS_SCHEMA",
    "INTAKE_PATH",
    "PROBE_PATH",
    "GlassLimits",
    "GlassReport",
    "glass_routes",
    "parse_report",
    "probe_source",
]
