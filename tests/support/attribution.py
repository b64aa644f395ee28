"""Streams on a shared wall clock for the attribution tests, a gateway's recording of them
over two files, and an engine page's values as prometheus_client reads them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from steadystream import Event, EventKind, Timeline, TokenSource, Where
from steadystream.files import write_jsonl

MS = 1_000_000


T0 = 1_767_225_600.0  # every stream's wall clock is counted from here


def stream(
    content_ms: Sequence[float],
    *,
    stream_id: str = "s",
    start_ms: float = 0.0,
    where: Where = Where.CLIENT,
    tokens: Sequence[int] | None = None,
    token_source: TokenSource = TokenSource.EXACT,
    cause: Sequence[str | None] | None = None,
) -> Timeline:
    """A stream sent at ``start_ms`` on the shared clock, content at ``content_ms`` after it,
    after a role event at 0 (so event indices and text indices differ by one)."""
    counts = list(tokens) if tokens is not None else [1] * len(content_ms)
    events = [Event(0, "", 0, EventKind.ROLE)]
    events += [
        Event(round(t * MS), "w " * n, n, EventKind.CONTENT)
        for t, n in zip(content_ms, counts, strict=True)
    ]
    annotations = None if cause is None else {"cause": [None, *cause]}
    return Timeline.from_events(
        events,
        stream_id=stream_id,
        where=where,
        started_at=T0 + start_ms / 1000,
        token_source=token_source,
        annotations=annotations,
    )


def cadence(start_ms: float, count: int, step_ms: float = 25.0) -> list[float]:
    return [start_ms + i * step_ms for i in range(count)]


GAP = [*cadence(30, 10), *cadence(30 + 9 * 25 + 600, 10)]  # 600 ms, ending at text event 10


def gateway_folder(root: Path) -> Path:
    """A gateway's recording over two files: request c's two edges are in different files,
    d has its upstream edge only (the client went away before it was recorded downstream)."""
    folder = root / "rec"
    folder.mkdir()
    write_jsonl(
        folder / "gateway-1.jsonl",
        [
            stream(GAP, stream_id="a", where=Where.GATEWAY_UPSTREAM),
            stream(GAP, stream_id="a", where=Where.GATEWAY_DOWNSTREAM),
            stream(cadence(30, 20), stream_id="b", where=Where.GATEWAY_UPSTREAM),
            stream(cadence(30, 20), stream_id="b", where=Where.GATEWAY_DOWNSTREAM),
            stream(cadence(30, 20), stream_id="c", where=Where.GATEWAY_UPSTREAM, start_ms=50),
        ],
    )
    write_jsonl(
        folder / "gateway-2.jsonl",
        [
            stream(cadence(30, 20), stream_id="c", where=Where.GATEWAY_DOWNSTREAM, start_ms=50),
            stream(cadence(30, 20), stream_id="d", where=Where.GATEWAY_UPSTREAM, start_ms=80),
        ],
    )
    return folder


def by_prometheus_client(text: str) -> dict[str, float]:
    """An engine page's values as steadystream's reader keeps them (summed over label sets;
    buckets, ``_created`` and non-finite values left out), read by prometheus_client's own
    parser: the reference the fast reader is held to."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")) or not math.isfinite(sample.value):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values
