"""One exception hierarchy for everything steadystream raises.

    SteadystreamError
     ├── InputError               something the user handed us is wrong
     │    ├── TimelineFormatError  a recorded file: names the file, line and field
     │    └── SpecError            a duration, pacer spec or option value
     ├── ConfigError              a configuration file: names the key and accepted values
     ├── ProtocolError            bytes from a peer that break SSE or the OpenAI chunk shape
     ├── UpstreamError            a peer we called failed
     │    ├── UpstreamConnectError  could not connect (refused, DNS, TLS)
     │    │    └── UpstreamTimeoutError  connected, but no response headers in time
     │    ├── UpstreamStatusError   answered with an HTTP error status
     │    └── UpstreamStreamError   broke off mid-stream (reset, in-band error, no [DONE])
     └── BrowserError             Chromium is missing, would not start, or a page failed

Lower-level errors (aiohttp, orjson, pydantic) are mapped at the boundary with
``raise Mapped(...) from exc`` and never leak to callers.
"""

from __future__ import annotations

__all__ = [
    "BrowserError",
    "ConfigError",
    "InputError",
    "ProtocolError",
    "SpecError",
    "SteadystreamError",
    "TimelineFormatError",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamStatusError",
    "UpstreamStreamError",
    "UpstreamTimeoutError",
]


class SteadystreamError(Exception):
    """Base class of every error steadystream raises on purpose."""


class InputError(SteadystreamError):
    """Something the user handed us (a file, an option, a request) is wrong."""


class TimelineFormatError(InputError):
    """A timeline file is malformed; the message names the file, line and field."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = ":".join(str(p) for p in (path, line) if p is not None)
        prefix = f"{where}: " if where else ""
        suffix = f" (field {field!r})" if field else ""
        super().__init__(f"{prefix}{message}{suffix}")


class SpecError(InputError):
    """A duration, pacer spec or option value that cannot be understood."""


class ConfigError(SteadystreamError):
    """A configuration file is invalid; the message names the key and the accepted values."""


class ProtocolError(SteadystreamError):
    """A peer's bytes break the SSE framing or the OpenAI chunk shape."""


class UpstreamError(SteadystreamError):
    """A server we called failed."""


class UpstreamConnectError(UpstreamError):
    """The connection could not be made (refused, DNS failure, TLS)."""


class UpstreamTimeoutError(UpstreamConnectError):
    """No response headers within the time allowed (a connection that hangs)."""


class UpstreamStatusError(UpstreamError):
    """The server answered with an HTTP error status."""

    def __init__(self, status: int, message: str, *, retry_after: str | None = None) -> None:
        self.status = status
        self.retry_after = retry_after  # the peer's Retry-After, checked, for a 429 or 503
        super().__init__(f"HTTP {status}: {message}")


class UpstreamStreamError(UpstreamError):
    """The stream broke off after it started (reset, in-band error, no [DONE])."""


class BrowserError(SteadystreamError):
    """Chromium is missing, would not start, or the page failed to draw."""
