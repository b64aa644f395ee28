"""Shared builders for tests (as aiperf's create_record): small timelines by hand."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from steadystream import Event, EventKind, Outcome, Timeline, Where

MS = 1_000_000


def make_timeline(
    content_ms: Sequence[float],
    *,
    stream_id: str = "s",
    tokens: Sequence[int] | None = None,
    role_ms: float | None = 0.0,
    usage_ms: float | None = None,
    outcome: Outcome = Outcome.COMPLETE,
    labels: dict[str, str] | None = None,
    wire_bytes: int | None = None,
    text: str = "w ",
    where: Where = Where.CLIENT,
) -> Timeline:
    """A stream with content events at ``content_ms`` (ms after request sent)."""
    counts = list(tokens) if tokens is not None else [1] * len(content_ms)
    events: list[Event] = []
    if role_ms is not None:
        events.append(Event(round(role_ms * MS), "", 0, EventKind.ROLE, wire_bytes))
    events += [
        Event(round(t * MS), text * n, n, EventKind.CONTENT, wire_bytes)
        for t, n in zip(content_ms, counts, strict=True)
    ]
    if usage_ms is not None:
        events.append(Event(round(usage_ms * MS), "", 0, EventKind.USAGE, wire_bytes))
    return Timeline.from_events(
        events, stream_id=stream_id, where=where, outcome=outcome, labels=labels or {}
    )


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A local Ray of 2 CPUs for the whole session (starting one takes seconds).

    Code under test finds Ray already initialised and uses it as it is, as it would inside a
    user's own Ray program.
    """
    import ray

    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",  # loopback only, as every test server here
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
    )
    try:
        yield ray
    finally:
        ray.shutdown()
