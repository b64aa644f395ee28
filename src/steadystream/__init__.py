"""steadystream: see and fix the stutter in LLM token streams."""

from steadystream.__about__ import __version__
from steadystream._clock import Clock, FakeClock, MonotonicClock
from steadystream._exceptions import (
    ConfigError,
    InputError,
    ProtocolError,
    SpecError,
    SteadystreamError,
    TimelineFormatError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
)
from steadystream._types import Event, EventKind, Outcome, TokenSource, Where
from steadystream.timeline import SCHEMA, Timeline

__all__ = [
    "SCHEMA",
    "Clock",
    "ConfigError",
    "Event",
    "EventKind",
    "FakeClock",
    "InputError",
    "MonotonicClock",
    "Outcome",
    "ProtocolError",
    "SpecError",
    "SteadystreamError",
    "Timeline",
    "TimelineFormatError",
    "TokenSource",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamStatusError",
    "UpstreamStreamError",
    "Where",
    "__version__",
]
