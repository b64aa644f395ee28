"""The gate's verdict on recorded runs, and the cancellation statistics bench shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadystream import InputError, Outcome, Timeline
from steadystream.bench import load_run, parse_rules
from steadystream.bench.cancel import cancellation_stats
from steadystream.bench.verdict import LoadedRun, judge_runs, load_runs
from steadystream.files import write_jsonl
from tests.support.bench import frozen_run, steady_run
from tests.support.timelines import make_timeline


def test_a_frozen_run_fails_and_a_rerun_passes() -> None:
    base = LoadedRun(Path("base.jsonl"), steady_run())
    failed = judge_runs(base, LoadedRun(Path("new.jsonl"), frozen_run()), parse_rules([]))
    assert not failed.passed
    assert "p99_of_worst_gap_s" in [row.metric for row in failed.report.failures]
    assert failed.notes == []
    rerun = judge_runs(base, LoadedRun(Path("again.jsonl"), steady_run()), parse_rules([]))
    assert rerun.passed
    assert (rerun.baseline, rerun.current) == (Path("base.jsonl"), Path("again.jsonl"))


def test_notes_say_when_a_verdict_is_weak() -> None:
    lagged = steady_run()
    for timeline in lagged[:5]:
        timeline.meta["client_lagged"] = True
    cut = LoadedRun(Path("cut.jsonl"), steady_run(), note="cut.jsonl: line 4 was cut off")
    verdict = judge_runs(cut, LoadedRun(Path("lagged.jsonl"), lagged), parse_rules([]))
    assert verdict.notes[0] == "cut.jsonl: line 4 was cut off"
    assert verdict.notes[1].startswith("lagged.jsonl: 5 of 10 streams were stamped while")


def test_load_run_keeps_a_cut_off_file_and_refuses_an_empty_one(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, steady_run(3))
    with path.open("ab") as file:
        file.write(b'{"schema": "steadystream.timeline/1", "stream_')
    loaded = load_run(path)
    assert len(loaded.timelines) == 3
    assert loaded.note is not None
    assert "line 4 was cut off" in loaded.note
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no streams in this run"):
        load_run(empty)


def test_several_files_read_as_one_run(tmp_path: Path) -> None:
    first, second, empty = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_jsonl(first, steady_run(2))
    write_jsonl(second, frozen_run(3))
    with second.open("ab") as file:
        file.write(b'{"schema": "steadystream.timeline/1"')
    empty.write_text("")
    timelines, notes = load_runs([first, second, empty])
    assert [t.stream_id for t in timelines] == ["s0", "s1", "f0", "f1", "f2"]
    assert len(notes) == 1
    assert notes[0].startswith(f"{second}: line 4 was cut off")


def test_cancellation_stats_count_only_what_bench_cancelled() -> None:
    def cancelled(latency: float | None, tax: int | None) -> Timeline:
        timeline = make_timeline([10.0, 20.0], outcome=Outcome.CANCELLED)
        timeline.meta["cancel_after"] = "2 tokens"
        if latency is not None:
            timeline.meta["cancel_latency_ms"] = latency
        if tax is not None:
            timeline.meta["tokens_after_disconnect"] = tax
        return timeline

    assert cancellation_stats(steady_run(3)) is None
    left = make_timeline([10.0], outcome=Outcome.CANCELLED)  # the client, not --cancel
    streams = [cancelled(10.0, 2), cancelled(30.0, 4), cancelled(None, None), left]
    stats = cancellation_stats(streams)
    assert stats is not None
    assert stats.cancelled == 3
    assert stats.latency_ms is not None
    assert (stats.latency_ms.count, stats.latency_ms.p50, stats.latency_ms.max) == (2, 20.0, 30.0)
    assert stats.tax_tokens is not None
    assert stats.tax_tokens.max == 4.0
    assert stats.notice_ms is None


def test_one_stream_against_one_is_never_a_pass_nor_a_failure() -> None:
    # One stream's bootstrap has no spread: every rule "passed" on no evidence.
    one = LoadedRun(Path("one.jsonl"), steady_run()[:1])
    same = judge_runs(one, LoadedRun(Path("same.jsonl"), steady_run()[:1]), parse_rules([]))
    assert {row.verdict for row in same.report.rows} <= {"unsure", "n/a"}
    assert "unsure" in {row.verdict for row in same.report.rows}
    assert not same.passed
    assert any("a run needs 2 streams at least" in note for note in same.notes)
    frozen = judge_runs(one, LoadedRun(Path("frozen.jsonl"), frozen_run()[:1]), parse_rules([]))
    assert "FAIL" not in {row.verdict for row in frozen.report.rows}
    many = judge_runs(
        LoadedRun(Path("a.jsonl"), steady_run()),
        LoadedRun(Path("b.jsonl"), steady_run()),
        parse_rules([]),
    )
    assert many.passed  # (the bound leaves runs of many streams as they were)
