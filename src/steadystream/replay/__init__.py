"""Recorded streams played back, with faults injected where you choose (docs/glass.md).

- :mod:`~steadystream.replay.inject`: injection specs and what they do to a plan (pure);
- :mod:`~steadystream.replay.source`: which recorded streams play, and each one's plan;
- :mod:`~steadystream.replay.response`: a plan written on its schedule, with ground truth;
- :mod:`~steadystream.replay.app` and :mod:`~steadystream.replay.server`: the server.
"""

from __future__ import annotations

from steadystream.replay.app import STREAM_HEADER, create_app
from steadystream.replay.inject import Injection, Plan, inject, parse_injection
from steadystream.replay.server import ReplayServer, serve

__all__ = [
    "STREAM_HEADER",
    "Injection",
    "Plan",
    "ReplayServer",
    "create_app",
    "inject",
    "parse_injection",
    "serve",
]
