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


# -- the relay's two builds (steadystream._build) ----------------------------------------------

_TWINNED = (
    ("StampedConnection", "steadystream.stamped._connection_py"),
    ("EventCutter", "steadystream.gateway._line_py"),
    ("StreamLine", "steadystream.gateway._line_py"),
    ("SseDecoder", "steadystream.protocol._sse_py"),
    ("ChatDialect", "steadystream.protocol._chat_py"),
)


def _build_names() -> list[str]:
    from steadystream._build import builds
    from steadystream.gateway import _line_py

    return ["python", "compiled"][: len(builds(_line_py))]


@pytest.fixture(params=_build_names())
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on each build of the relay's hot path that is here: its Python source,
    and that source compiled by Cython (where the package was built with a compiler).

    The gateway and the bench client choose their build per stream from
    ``STEADYSTREAM_NATIVE``; the classes a test module names itself are swapped for the
    build's own for the test.
    """
    import importlib

    from steadystream._build import builds, twin

    name: str = request.param
    monkeypatch.setenv("STEADYSTREAM_NATIVE", "1" if name == "compiled" else "0")
    module = request.module
    for attribute, source_name in _TWINNED:
        source = importlib.import_module(source_name)
        named = getattr(module, attribute, None)
        if any(named is getattr(each, attribute) for each in builds(source)):
            chosen = getattr(twin(source), attribute)
            assert (name == "compiled") == (chosen is not getattr(source, attribute))
            monkeypatch.setattr(module, attribute, chosen)
    return name
