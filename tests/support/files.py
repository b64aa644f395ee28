"""Timelines that exercise the file formats: every field set, None wherever allowed, no events;
and a Parquet file damaged where its footer does not notice."""

from __future__ import annotations

from pathlib import Path

from steadystream import Outcome, Timeline, TokenSource, Where
from steadystream.files import write_parquet
from tests.support.timelines import make_timeline


def rich_stream(stream_id: str = "rich") -> Timeline:
    """A stream that sets every field the format has."""
    base = make_timeline([120, 140, 175], stream_id=stream_id, usage_ms=176, tokens=[1, 2, 1])
    return base.replace(
        where=Where.GATEWAY_UPSTREAM,
        header_ns=90_000_000,
        first_byte_ns=100_000_000,
        end_ns=180_000_000,
        outcome=Outcome.FAILED_OVER,
        error="upstream a reset; finished on b",
        usage={"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
        token_source=TokenSource.USAGE_PROPORTIONAL,
        labels={"model": "lab", "route": "/v1/chat/completions", "tenant": "acme"},
        started_at=1763729000.123,
        annotations={"cause": [None, None, "kv-preemption", None, None]},
        meta={"run": "r1", "upstreams": ["a", "b"], "retry": {"after_ms": 40}},
    )


def bare_stream(stream_id: str = "bare") -> Timeline:
    """None wherever None is allowed, and no text."""
    return make_timeline([50, 70], stream_id=stream_id).replace(
        texts=None, first_byte_ns=None, end_ns=None, usage=None
    )


def empty_stream() -> Timeline:
    return Timeline.from_events([], stream_id="empty", outcome=Outcome.ERROR, error="refused")


STREAMS = [rich_stream(), bare_stream(), empty_stream()]


def corrupt_parquet(path: Path) -> None:
    """Write a good file at ``path``, then flip bytes of its data, its footer kept intact."""
    write_parquet(path, [bare_stream(f"s{i}") for i in range(50)])
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")  # the footer's length, before "PAR1"
    data_end = len(data) - 8 - footer
    middle = data_end // 2
    for k in range(middle, min(middle + 200, data_end)):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
