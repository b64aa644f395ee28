"""A first token released in a lump: a server's policy only when most of the *other* streams'
heads came so; and the head lumps found in whole-array passes, as an event-by-event walk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from steadystream.attribution import explain, streams
from steadystream.attribution.streams import head_lumps
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.metrics import ARRIVAL_WINDOW_NS
from tests.support.attribution import cadence, stream

_register()
runner = CliRunner()

HELD = [900 + 0.01 * i for i in range(8)] + cadence(930, 19, 30)  # 8 events with the first
SMOOTH = cadence(30, 40, 30)


def first_token_cause(lumped: int, smooth: int) -> tuple[str, str]:
    """The cause and evidence of stream h0's held head among ``lumped`` held and ``smooth``
    smooth streams (each held head another size, 8, 11, 14...: lumps of about one size would
    be rule 2a's fixed head)."""
    timelines = [
        stream(
            [900 + 0.01 * k for k in range(8 + 3 * i)] + cadence(930, 19, 30),
            stream_id=f"h{i}",
            start_ms=i,
        )
        for i in range(lumped)
    ]
    timelines += [stream(SMOOTH, stream_id=f"s{i}", start_ms=i + 0.5) for i in range(smooth)]
    (stall,) = [s for s in explain(timelines).stalls if s.stream_id == "h0" and s.first_token]
    return stall.cause, stall.evidence


def test_one_streams_own_lump_is_no_server_policy(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [stream(HELD, stream_id="a"), stream(SMOOTH, stream_id="b", start_ms=0.1)])
    result = runner.invoke(app, ["explain", str(path), "--json"])
    assert result.exit_code == 0, result.output
    (stall,) = orjson.loads(result.output)["stalls"]
    assert stall["cause"] == "connection-hiccup"
    assert "of all streams" not in stall["evidence"]
    # alone in the run too
    assert explain([stream(HELD, stream_id="a")]).stalls[0].cause == "connection-hiccup"


@pytest.mark.parametrize(
    ("lumped", "smooth", "cause"),
    [
        (2, 1, "connection-hiccup"),  # 1 of 2 others: not above half
        (2, 0, "connection-hiccup"),  # 1 other: too few to say
        (3, 1, "head-burst"),  # 2 of 3 others
        (3, 0, "head-burst"),  # 2 of 2 others
        (3, 2, "connection-hiccup"),  # 2 of 4 others
    ],
)
def test_a_held_head_is_a_policy_when_over_half_of_two_or_more_others(
    lumped: int, smooth: int, cause: str
) -> None:
    said, evidence = first_token_cause(lumped, smooth)
    assert said == cause, evidence
    if cause == "head-burst":
        assert f"of the {lumped + smooth - 1} other streams" in evidence


def walked(offsets: np.ndarray, times: np.ndarray) -> list[int]:
    """Each row's head lump, an event at a time (what head_lumps computes)."""
    lumps = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        end = a + 1
        while end < b and times[end] - times[end - 1] < ARRIVAL_WINDOW_NS:
            end += 1
        lumps.append(min(end, b) - a)
    return lumps


@pytest.mark.parametrize("batch_events", [1 << 20, 7, 1])
def test_head_lumps_equal_an_event_by_event_walk(
    monkeypatch: pytest.MonkeyPatch, batch_events: int
) -> None:
    monkeypatch.setattr(streams, "_BATCH_EVENTS", batch_events)  # rows split over batches
    rng = np.random.default_rng(7)
    steps = np.array([0, ARRIVAL_WINDOW_NS // 2, ARRIVAL_WINDOW_NS - 1, ARRIVAL_WINDOW_NS, 10**7])
    for _ in range(200):
        lengths = rng.integers(0, 12, size=rng.integers(0, 20))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        times = np.cumsum(rng.choice(steps, size=int(offsets[-1]))).astype(np.int64)
        assert head_lumps(offsets, times).tolist() == walked(offsets, times)
    # one row all in one arrival, beside empty rows
    offsets = np.array([0, 0, 5000, 5000], dtype=np.int64)
    assert head_lumps(offsets, np.zeros(5000, dtype=np.int64)).tolist() == [0, 5000, 0]
