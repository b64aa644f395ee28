"""W3C Trace Context: continued when valid, a new trace otherwise."""

from __future__ import annotations

import pytest

from steadystream.otel import begin_trace
from steadystream.otel.traceparent import parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def test_a_valid_traceparent_is_continued_with_a_new_span() -> None:
    trace = begin_trace(f"00-{TRACE}-{PARENT}-01", "congo=t61rcWkgMzE")
    assert f"{trace.trace_id:032x}" == TRACE
    assert f"{trace.parent_span_id:016x}" == PARENT
    assert trace.sampled
    assert trace.parent_sampled
    assert trace.span_id not in (0, int(PARENT, 16))
    assert trace.headers() == {
        "traceparent": f"00-{TRACE}-{trace.span_id:016x}-01",
        "tracestate": "congo=t61rcWkgMzE",
    }


def test_an_unsampled_parent_stays_unsampled() -> None:
    trace = begin_trace(f"00-{TRACE}-{PARENT}-00")
    assert not trace.sampled
    assert trace.traceparent.endswith("-00")


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"00-{'0' * 32}-{PARENT}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent
        f"ff-{TRACE}-{PARENT}-01",  # version ff is invalid
        f"00-{TRACE}-{PARENT}-01-extra",  # version 00 has four fields
        f"00-{TRACE[:-1]}-{PARENT}-01",
    ],
)
def test_anything_else_starts_a_new_sampled_trace(header: str | None) -> None:
    assert parse_traceparent(header) is None
    trace = begin_trace(header, "congo=x")
    assert trace.parent_span_id is None
    assert trace.tracestate is None  # tracestate never goes on without its parent
    assert trace.sampled
    assert trace.trace_id != int(TRACE, 16)
    assert trace.headers() == {"traceparent": f"00-{trace.trace_id:032x}-{trace.span_id:016x}-01"}


def test_a_later_version_is_read_by_its_first_four_fields_and_tracestate_is_bounded() -> None:
    assert parse_traceparent(f"01-{TRACE}-{PARENT}-01-what-comes-later") == (
        int(TRACE, 16),
        int(PARENT, 16),
        True,
    )
    assert begin_trace(f"00-{TRACE}-{PARENT}-01", "a=" + "x" * 600).tracestate is None
