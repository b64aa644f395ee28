"""The what-if comparison and the ``steadystream whatif`` command."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Event, EventKind, Timeline
from steadystream.cli import _register, app
from steadystream.files import read_jsonl, write_jsonl
from steadystream.shaping import Leaky, Passthrough, Rechunk, what_if
from tests.support.shaping import MS

_register()
runner = CliRunner()


def stalled_stream(name: str) -> Timeline:
    """100 tokens a second, 40 of them, a 500 ms freeze, then 40 more."""
    times = [10 * i for i in range(40)] + [890 + 10 * i for i in range(40)]
    events = [Event(0, "", 0, EventKind.ROLE)]
    events += [Event(t * MS, f" w{i}", 1) for i, t in enumerate(times)]
    events.append(Event(1300 * MS, "", 0, EventKind.USAGE))
    return Timeline.from_events(events, stream_id=name)


# A 20 ms bucket releases half of each burst late: 20 tokens in reserve cover the freeze.
SMOOTH = Leaky(interval_ns=20 * MS, capacity=40)
# Holds every token 100 ms: adds TTFT and hides nothing.
SLOW = Rechunk(min_tokens=1000, max_wait_ns=100 * MS)


def test_the_pacer_that_hides_the_freeze_is_best() -> None:
    runs = [stalled_stream("a"), stalled_stream("b")]
    result = what_if(runs, [Passthrough(), SMOOTH, SLOW], max_added_ttft_ns=50 * MS)
    assert result.streams == 2
    assert result.before.stall_count == 2
    passthrough, smooth, slow = result.pacers
    assert passthrough.after == result.before
    assert smooth.after.stall_count == 0
    assert smooth.after.p99_of_worst_gap_s is not None
    assert smooth.after.p99_of_worst_gap_s < 0.4
    assert (smooth.added_ttft_p50_s, smooth.added_ttft_p99_s) == (0.0, 0.0)
    # The reserve drains within the 300 ms tail from the end of the stream (the usage
    # chunk, 20 ms after the last token).
    assert smooth.tail_delay_p99_s is not None
    assert 0 < smooth.tail_delay_p99_s <= 0.3 + 0.02
    assert slow.added_ttft_p99_s == pytest.approx(0.1)
    assert not slow.within_limit
    assert result.best == 1
    assert result.best_pacer is smooth


def test_no_pacer_is_best_when_none_is_within_the_ttft_limit() -> None:
    result = what_if([stalled_stream("a")], [SLOW], max_added_ttft_ns=50 * MS)
    assert result.best is None
    assert result.to_dict()["best"] is None


def test_the_paced_timelines_are_kept_only_when_asked() -> None:
    runs = [stalled_stream("a")]
    assert what_if(runs, [SMOOTH]).pacers[0].timelines == []
    kept = what_if(runs, [SMOOTH], keep_timelines=True).pacers[0].timelines
    assert [t.stream_id for t in kept] == ["a"]
    assert kept[0].meta["pacer"] == "leaky:interval=20ms,capacity=40,tail=300ms"


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [stalled_stream("a"), stalled_stream("b")])
    return path


def test_whatif_json_names_the_best_pacer(run_file: Path) -> None:
    result = runner.invoke(
        app,
        [
            "whatif",
            str(run_file),
            "--pacer",
            "passthrough",
            "--pacer",
            "leaky:interval=20ms,capacity=40",
            "--pacer",
            "rechunk:min_tokens=1000,max_wait=100ms",
            "--max-added-ttft",
            "50ms",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert data["best"] == "leaky:interval=20ms,capacity=40"
    assert data["before"]["stall_count"] == 2
    assert [p["within_limit"] for p in data["pacers"]] == [True, True, False]
    assert data["max_added_ttft_s"] == 0.05


def test_whatif_says_a_file_was_cut_off_and_counts_its_complete_streams(
    run_file: Path,
) -> None:
    # A recorder that crashed mid-line: the complete streams count, and the cut is said (in
    # the table's output and in the JSON), as analyze, gate and report say it.
    whole = run_file.read_bytes()
    run_file.write_bytes(whole + whole[: len(whole) // 4])
    result = runner.invoke(app, ["whatif", str(run_file), "-p", "flush"])
    assert result.exit_code == 0, result.output
    assert "line 3 was cut off mid-record" in result.output
    result = runner.invoke(app, ["whatif", str(run_file), "-p", "flush", "--json"])
    data = orjson.loads(result.output)
    assert data["streams"] == 2
    assert "line 3 was cut off" in data["notes"][0]


def test_whatif_table_marks_the_best(run_file: Path) -> None:
    result = runner.invoke(
        app, ["whatif", str(run_file), "-p", "leaky:interval=20ms,capacity=40", "-p", "flush"]
    )
    assert result.exit_code == 0, result.output
    assert "recorded" in result.output
    assert "1  leaky:interval=20ms,capacity=40  (best)" in result.output
    assert "worst gap" in result.output


def test_whatif_writes_one_file_per_pacer(run_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "paced.jsonl"
    result = runner.invoke(
        app, ["whatif", str(run_file), "-p", "leaky", "-p", "flush", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    leaky = read_jsonl(tmp_path / "paced.1-leaky.jsonl").timelines
    flush = read_jsonl(tmp_path / "paced.2-flush.jsonl").timelines
    assert [t.stream_id for t in leaky] == ["a", "b"]
    assert [t.total_tokens for t in flush] == [80, 80]
    single = tmp_path / "one.jsonl"
    result = runner.invoke(app, ["whatif", str(run_file), "-p", "leaky", "-o", str(single)])
    assert result.exit_code == 0, result.output
    assert len(read_jsonl(single).timelines) == 2


def test_a_bad_spec_exits_naming_the_parameter(run_file: Path) -> None:
    result = runner.invoke(app, ["whatif", str(run_file), "-p", "leaky:capacty=3"])
    assert result.exit_code == 2
    assert "capacty" in result.output
    assert "capacity" in result.output
