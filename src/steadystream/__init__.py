"""steadystream: see and fix the stutter in LLM token streams."""

from steadystream.__about__ import __version__
from steadystream._clock import Clock, FakeClock, MonotonicClock
from steadystream._exceptions import (
    BrowserError,
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
    UpstreamTimeoutError,
)
from steadystream._types import Event, EventKind, Outcome, TokenSource, Where
from steadystream.timeline import SCHEMA, Timeline

__all__ = [
    "SCHEMA",
    "BrowserError",
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
    "UpstreamTimeoutError",
    "Where",
    "__version__",
]
