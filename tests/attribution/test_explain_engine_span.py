"""Engine metrics are named as evidence for the stalls they spanned; scraped over another
span of time (another run's file, times in ms), they are named as read over no stall, and a
note says when they were scraped and when the stalls were."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
from typer.testing import CliRunner

from steadystream import Timeline
from steadystream.attribution import EngineSamples, explain
from steadystream.attribution.engine import PREEMPTIONS
from steadystream.cli import _register, app
from steadystream.engine_metrics import SCHEMA
from steadystream.files import write_jsonl
from tests.support.attribution import GAP, T0, cadence, stream

_register()
runner = CliRunner()


def scrapes(start_s: float, count: int = 20) -> list[tuple[float, dict[str, float]]]:
    return [(start_s + k / 10, {PREEMPTIONS: float(k > 3)}) for k in range(count)]


def run() -> list[Timeline]:
    """Two streams with a 600 ms gap each, the second a minute after the first."""
    return [stream(GAP, stream_id="a"), stream(GAP, stream_id="b", start_ms=60_000)]


def test_scrapes_over_every_stall_are_named_as_before() -> None:
    engine = EngineSamples.from_scrapes([*scrapes(T0), *scrapes(T0 + 60)])
    done = explain(run(), engine=engine)
    assert done.sources[-1] == "engine metrics (40 scrapes)"
    assert done.notes == []


def test_scrapes_over_some_stalls_say_how_many() -> None:
    done = explain(run(), engine=EngineSamples.from_scrapes(scrapes(T0)))
    assert done.sources[-1] == "engine metrics (20 scrapes, over 1 of the 2 stalls)"
    assert done.notes == []
    a, b = done.stalls
    assert a.engine_read
    assert not b.engine_read
    assert "no engine metrics" in b.evidence


def test_scrapes_over_no_stall_are_named_so_with_a_note(tmp_path: Path) -> None:
    # the scrapes' times written in ms: read as seconds, they are thousands of years out
    path = tmp_path / "run.jsonl"
    write_jsonl(path, run())
    metrics = tmp_path / "ms.engine-metrics.jsonl"
    metrics.write_bytes(
        b"".join(
            orjson.dumps({"schema": SCHEMA, "t": t * 1000, "values": values}) + b"\n"
            for t, values in scrapes(T0)
        )
    )
    result = runner.invoke(app, ["explain", str(path), "--engine-metrics", str(metrics), "--json"])
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.output)
    assert "engine metrics (20 scrapes, none across a stall)" in payload["sources"]
    assert all("no engine metrics" in stall["evidence"] for stall in payload["stalls"])
    assert any("cover none of the 2 stalls" in note for note in payload["notes"])  # (said)

    engine = EngineSamples.from_scrapes([(t * 1000, values) for t, values in scrapes(T0)])
    (note,) = explain(run(), engine=engine).notes
    assert note.startswith("engine metrics (20 scrapes, scraped from unix 1767225600000 s to")
    assert "cover none of the 2 stalls (from 2026-01-01 00:00:00.255 UTC to" in note
    assert "2026-01-01 00:01:00.855 UTC)" in note  # the second stall's end
    # from another run: an hour earlier
    (note,) = explain(run(), engine=EngineSamples.from_scrapes(scrapes(T0 - 3600))).notes
    assert "scraped from 2025-12-31 23:00:00.000 UTC to 2025-12-31 23:00:01.900 UTC" in note


def test_stalls_without_a_wall_clock_cannot_be_joined_to_scrapes() -> None:
    unclocked = replace(stream(GAP, stream_id="a"), started_at=None)
    done = explain([unclocked], engine=EngineSamples.from_scrapes(scrapes(T0)))
    assert done.sources[-1] == "engine metrics (20 scrapes, none across a stall)"
    (note,) = done.notes
    assert "no stall has a wall clock (started_at)" in note


def test_no_stall_no_note() -> None:
    done = explain([stream(cadence(30, 20))], engine=EngineSamples.from_scrapes(scrapes(T0)))
    assert done.sources[-1] == "engine metrics (20 scrapes)"
    assert done.notes == []
