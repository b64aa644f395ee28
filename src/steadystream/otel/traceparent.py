"""W3C Trace Context (``traceparent``, ``tracestate``): the caller's trace continued, and
passed on.

The gateway's span is made when its stream ends (export never waits on the relay), but the
upstream request goes out at the start and must already carry the gateway span's id. So the
ids are chosen here, when the request arrives, and the span is made with them later
(:mod:`steadystream.otel.sdk` hands them to the SDK's tracer).

Pure: no OpenTelemetry import, no I/O.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TraceContext", "begin_trace", "parse_traceparent"]

# version 00 (and any later version, read as 00 asks: its first four fields)
_TRACEPARENT = re.compile(
    r"^(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?$"
)
_MAX_TRACESTATE = 512  # the W3C limit a vendor must propagate at least


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One request's place in a trace: its own span's ids and, when the client sent a
    ``traceparent``, the span it continues."""

    trace_id: int
    span_id: int
    sampled: bool
    parent_span_id: int | None = None
    parent_sampled: bool = False
    tracestate: str | None = None

    @property
    def traceparent(self) -> str:
        """The header for the next hop: this span as its parent."""
        flags = "01" if self.sampled else "00"
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}"

    def headers(self) -> dict[str, str]:
        """``traceparent`` (and ``tracestate``, as it came) for the upstream request."""
        headers = {"traceparent": self.traceparent}
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        return headers


def parse_traceparent(header: str | None) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled) of a valid header; None for anything else, which
    the W3C specification says to treat as no header (a new trace starts)."""
    if header is None:
        return None
    match = _TRACEPARENT.match(header.strip().lower())
    if match is None or match["version"] == "ff":
        return None
    if match["version"] == "00" and match["rest"] is not None:
        return None  # version 00 has exactly four fields
    trace_id, parent = int(match["trace"], 16), int(match["parent"], 16)
    if trace_id == 0 or parent == 0:
        return None
    return trace_id, parent, bool(int(match["flags"], 16) & 1)


def begin_trace(
    traceparent: str | None,
    tracestate: str | None = None,
    *,
    random_bits: Callable[[int], int] = secrets.randbits,
) -> TraceContext:
    """The context of a request that arrived with these headers.

    A valid ``traceparent`` is continued (same trace, its span as the parent, sampled as it
    was); otherwise a new trace starts, sampled. (The SDK's sampler has the last word:
    :meth:`steadystream.otel.sdk.OtelExporter.begin`.) ``tracestate`` goes on only with a
    valid parent, and only within the W3C bound.
    """
    span_id = _nonzero(random_bits, 64)
    parent = parse_traceparent(traceparent)
    if parent is None:
        return TraceContext(_nonzero(random_bits, 128), span_id, sampled=True)
    trace_id, parent_span_id, sampled = parent
    state = tracestate.strip() if tracestate else None
    if state is not None and (len(state) > _MAX_TRACESTATE or not state.isascii()):
        state = None
    return TraceContext(trace_id, span_id, sampled, parent_span_id, sampled, state or None)


def _nonzero(random_bits: Callable[[int], int], bits: int) -> int:
    while True:
        value = random_bits(bits)
        if value:
            return value
