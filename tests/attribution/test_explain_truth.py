"""`explain --truth`: a malformed ``cause_ns`` is an error naming where it is, and runs that
reuse ids are each scored against their own truth."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Timeline, TimelineFormatError, Where
from steadystream.attribution import explain, score
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from tests.support.attribution import GAP, cadence, stream

_register()
runner = CliRunner()


def lab_truth(cause_ns: str | None, *, stream_id: str = "a") -> Timeline:
    """The lab's record of ``GAP``: its gap (text event 10, event 11) made by kv-preemption."""
    causes: list[str | None] = [None] * len(GAP)
    causes[10] = "kv-preemption"
    timeline = stream(GAP, stream_id=stream_id, where=Where.LAB, cause=causes)
    delays: list[str | None] = [None] * len(timeline)
    delays[11] = cause_ns
    timeline.annotations["cause_ns"] = delays
    return timeline


@pytest.mark.parametrize(
    ("cause_ns", "says"),
    [
        ("kv-preemption", "is not CAUSE=NANOSECONDS"),
        ("=", "is not CAUSE=NANOSECONDS"),
        ("kv-preemption=600000000+queueing", "'queueing' is not CAUSE=NANOSECONDS"),
        ("kv-preemption=abc", "('abc') is not a number of ns"),
        ("kv-preemption=inf", "is not a finite number of ns >= 0"),
        ("kv-preemption=nan", "is not a finite number of ns >= 0"),
        ("kv-preemption=-5", "is not a finite number of ns >= 0"),
        ("kv-preemption=1e308+queueing=1e308", "add up past what a number holds"),
    ],
)
def test_a_bad_cause_ns_names_the_file_stream_event_and_field(
    tmp_path: Path, cause_ns: str, says: str
) -> None:
    run = tmp_path / "run.jsonl"
    write_jsonl(run, [stream(GAP, stream_id="a")])
    truth = tmp_path / "truth.jsonl"
    write_jsonl(truth, [lab_truth(cause_ns)])
    # through the CLI: a clear error, no traceback (and nothing scored without it)
    result = runner.invoke(app, ["explain", str(run), "--truth", str(truth), "--json"])
    assert result.exit_code == 2, result.output
    assert "stream 'a', event 11" in result.output
    assert says in result.output
    assert "'annotations.cause_ns'" in result.output
    assert "truth.jsonl" in result.output  # (the CLI names the truth file)
    assert "Traceback" not in result.output
    # given the files, the message starts with the file's name
    explained = explain([stream(GAP, stream_id="a")])
    with pytest.raises(TimelineFormatError, match=r"^.*truth\.jsonl: stream 'a', event 11") as err:
        score(explained, [lab_truth(cause_ns)], files=[0], paths=[truth])
    assert err.value.field == "annotations.cause_ns"
    assert err.value.path == str(truth)


def test_a_good_cause_ns_still_splits_the_truth() -> None:
    explained = explain([stream(GAP, stream_id="a")])
    scored = score(explained, [lab_truth("kv-preemption=450000000+queueing=150000000")])
    true = {cause for cause, _ in scored.seconds}
    assert true == {"kv-preemption", "queueing"}
    assert scored.total_s == pytest.approx(0.6)
    # a zero delay is no share; all of them zero: the main cause has it all
    zero = score(explained, [lab_truth("kv-preemption=0+queueing=0")])
    assert {cause for cause, _ in zero.seconds} == {"kv-preemption"}


def test_runs_that_reuse_ids_are_scored_against_their_own_truth(tmp_path: Path) -> None:
    # run A: "x" waits 900 ms for its first token (queueing); run B reuses "x" and freezes
    # 830 ms mid-stream (kv-preemption); each run has its own truth file
    waited = cadence(900, 10, 30)
    frozen = [t if i < 5 else t + 800 for i, t in enumerate(cadence(30, 10, 30))]
    first_token: list[str | None] = [None] * 10
    first_token[0] = "queueing"
    mid: list[str | None] = [None] * 10
    mid[5] = "kv-preemption"
    paths = {}
    for name, timeline in (
        ("runA", stream(waited, stream_id="x")),
        ("runB", stream(frozen, stream_id="x", start_ms=60_000)),
        ("truthA", stream(waited, stream_id="x", where=Where.LAB, cause=first_token)),
        ("truthB", stream(frozen, stream_id="x", where=Where.LAB, cause=mid, start_ms=60_000)),
    ):
        paths[name] = tmp_path / f"{name}.jsonl"
        write_jsonl(paths[name], [timeline])
    args = ["explain", str(paths["runA"]), str(paths["runB"]), "--json"]
    args += ["--truth", str(paths["truthA"]), "--truth", str(paths["truthB"])]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    truth = orjson.loads(result.output)["truth"]
    assert truth["unmatched_stalls"] == 0
    assert set(truth["matrix_s"]) == {"queueing", "kv-preemption"}  # no "none": none misjoined
    assert truth["matrix_s"]["queueing"] == {"queueing": pytest.approx(0.9)}
    assert truth["matrix_s"]["kv-preemption"] == {"kv-preemption": pytest.approx(0.83)}


def test_truth_files_pair_with_runs_by_file_as_vantage_points_do() -> None:
    run_a, run_b = stream(GAP, stream_id="a"), stream(GAP, stream_id="a", start_ms=60_000)
    explained = explain([run_a, run_b], files=[0, 1])
    assert [stall.rerun for stall in explained.stalls] == [0, 1]
    hiccup, preempted = lab_truth(None), lab_truth(None)
    assert hiccup.annotations["cause"][11] == "kv-preemption"
    hiccup.annotations["cause"][11] = "connection-hiccup"
    # two lab records of "a" in one truth file are one stream (the later one read):
    # the second run has no truth of its own
    one_file = score(explained, [preempted, hiccup], files=[0, 0])
    assert one_file.unmatched == 1
    # in two files (or with no files said: the lab records one per request), one each
    for files in ([0, 1], None):
        both = score(explained, [preempted, hiccup], files=files)
        assert both.unmatched == 0
        assert set(both.true_causes) == {"kv-preemption", "connection-hiccup"}
