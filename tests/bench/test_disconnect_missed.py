"""bench --disconnect: streams chosen for a drop that ended before their drop point are
recorded as chosen, and the reconnect summary says how many never dropped."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream._types import EventKind, Outcome
from steadystream.bench import RunOptions
from steadystream.bench.disconnect import DisconnectPolicy, Reconnect, reconnect_summary
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.lab import LabServer
from steadystream.timeline import Timeline
from tests.support.bench import small_run

MS = 1_000_000

_register()
runner = CliRunner()


def _timeline(name: str, *, chosen: bool, dropped: bool) -> Timeline:
    events = [(t * MS, "x", 1, EventKind.CONTENT) for t in (10, 20, 400, 410)]
    timeline = Timeline.from_events(events, stream_id=name, outcome=Outcome.COMPLETE)
    if chosen:
        timeline.meta["disconnect"] = "after 2 tokens, back 300ms"
    if dropped:
        back = Reconnect(dropped_ns=25 * MS, last_event_id="2", asked_ns=300 * MS)
        back.first_ns, back.status, back.replayed = 400 * MS, 200, 2
        timeline.meta["reconnects"] = [back.as_meta()]
    return timeline


def test_the_summary_counts_chosen_streams_that_never_dropped() -> None:
    timelines = [
        _timeline("dropped", chosen=True, dropped=True),
        _timeline("short-1", chosen=True, dropped=False),
        _timeline("short-2", chosen=True, dropped=False),
        _timeline("not-chosen", chosen=False, dropped=False),
    ]
    summary = reconnect_summary(timelines)
    assert summary is not None
    assert (summary.streams, summary.reconnects, summary.ended_before_drop) == (1, 1, 2)


def test_a_run_where_no_chosen_stream_reached_its_drop_point_still_says_so() -> None:
    summary = reconnect_summary([_timeline("short", chosen=True, dropped=False)])
    assert summary is not None
    assert (summary.reconnects, summary.ended_before_drop) == (0, 1)
    assert reconnect_summary([_timeline("plain", chosen=False, dropped=False)]) is None


def test_analyze_says_how_many_chosen_streams_ended_before_their_drop(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(
        path,
        [
            _timeline("dropped", chosen=True, dropped=True),
            _timeline("short-1", chosen=True, dropped=False),
            _timeline("short-2", chosen=True, dropped=False),
        ],
    )
    shown = runner.invoke(app, ["analyze", str(path)])
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    assert "reconnects: 1 in 1 streams" in line
    assert "2 of 3 streams chosen for a drop ended before their drop point" in line
    as_json = orjson.loads(runner.invoke(app, ["analyze", str(path), "--json"]).output)
    assert as_json["reconnects"]["ended_before_drop"] == 2

    write_jsonl(path, [_timeline("short", chosen=True, dropped=False)])
    shown = runner.invoke(app, ["analyze", str(path)])
    line = " ".join(shown.output.split())
    assert (
        "reconnects: none; 1 of 1 streams chosen for a drop ended before their drop point" in line
    )


@pytest.mark.integration
@pytest.mark.asyncio
async def test_bench_records_a_stream_chosen_for_a_drop_that_ended_first(lab: LabServer) -> None:
    policy = DisconnectPolicy.parse("after=1000tok,back=10ms")  # past a 4-token answer
    result = await small_run(
        lab.base_url,
        requests=2,
        max_tokens=4,
        options=RunOptions(max_requests=2, disconnect=policy),
    )
    assert len(result.timelines) == 2
    for timeline in result.timelines:
        assert timeline.outcome is Outcome.COMPLETE
        assert timeline.meta["disconnect"] == "after 1000 tokens, back 10ms"
        assert "reconnects" not in timeline.meta
    summary = reconnect_summary(result.timelines)
    assert summary is not None
    assert (summary.reconnects, summary.ended_before_drop) == (0, 2)
