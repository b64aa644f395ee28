"""bench --disconnect: the spec, the ids a return is judged by, and what analyze reports."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream._exceptions import SpecError, TimelineFormatError
from steadystream._types import EventKind, Outcome
from steadystream.bench.disconnect import (
    DisconnectPolicy,
    EventIds,
    Reconnect,
    reconnect_summary,
    resume_headers,
    resume_path,
)
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.protocol import SseItem
from steadystream.protocol.sse import SseDecoder
from steadystream.timeline import Timeline

MS = 1_000_000

_register()
runner = CliRunner()


def test_the_spec_reads_every_key_and_its_defaults() -> None:
    policy = DisconnectPolicy.parse("after=40tok,back=1.5s,share=0.25", seed=3)
    assert policy.plan.after.after_tokens == 40
    assert policy.plan.back_ns == 1_500 * MS
    assert policy.share == 0.25
    assert policy.seed == 3
    plain = DisconnectPolicy.parse(" after = 500ms ")
    assert plain.plan.after.after_ns == 500 * MS
    assert plain.plan.back_ns == 2_000 * MS
    assert plain.share == 1.0
    assert plain.plan.describe() == "after 500ms, back 2000ms"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("back=2s", "say when to drop"),
        ("after=40tok,after=3tok", "given twice"),
        ("after=40tok,when=2s", "unknown key 'when'"),
        ("after", "not key=value"),
        ("after=soon", "is not a point"),
        ("after=4tok,share=1.5", "share='1.5'"),
        ("after=4tok,share=nan", "share='nan'"),
        ("after=4tok,back=forever", "--disconnect back"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(SpecError, match="disconnect") as caught:
        DisconnectPolicy.parse(text)
    assert words in str(caught.value)


def test_which_streams_drop_is_seeded_per_request() -> None:
    policy = DisconnectPolicy.parse("after=4tok,share=0.5", seed=7)
    chosen = [policy.for_request(i) is not None for i in range(400)]
    assert chosen == [policy.for_request(i) is not None for i in range(400)]
    assert 150 < sum(chosen) < 250  # about half
    other = DisconnectPolicy.parse("after=4tok,share=0.5", seed=8)
    assert chosen != [other.for_request(i) is not None for i in range(400)]
    assert all(DisconnectPolicy.parse("after=4tok").for_request(i) for i in range(50))
    assert not any(DisconnectPolicy.parse("after=4tok,share=0").for_request(i) for i in range(50))


def test_the_resume_path_sits_beside_the_request_path() -> None:
    assert resume_path("/v1/chat/completions", "chat/completions", "abc") == "/v1/streams/abc"
    assert resume_path("/gw/v1/messages?beta=1", "messages", "a/b c") == "/gw/v1/streams/a%2Fb%20c"
    assert resume_path("/other", "chat/completions", "x") == "/other/streams/x"


def test_the_resume_request_keeps_credentials_and_names_the_last_event() -> None:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k", "X-Id": "r1"}
    assert resume_headers(headers, "41") == {
        "Authorization": "Bearer k",
        "X-Id": "r1",
        "Last-Event-ID": "41",
    }
    assert "Last-Event-ID" not in resume_headers(headers, None)


def _items(wire: bytes) -> list[SseItem]:
    return SseDecoder().feed(wire)


def test_ids_count_what_a_return_lost_or_doubled() -> None:
    ids = EventIds()
    ids.see(_items(b"id: 1\ndata: a\n\nid: 2\ndata: b\n\n"))
    assert (ids.last, ids.lost, ids.doubled) == ("2", 0, 0)
    ids.see(_items(b"id: 2\ndata: b\n\nid: 3\ndata: c\n\nid: 6\ndata: f\n\n"))
    assert (ids.last, ids.lost, ids.doubled) == ("6", 2, 1)
    assert ids.seen == 5


def test_ids_that_are_not_numbers_are_not_judged() -> None:
    ids = EventIds()
    ids.see(_items(b"id: x\ndata: a\n\nid: 9\ndata: b\n\nid: 2\ndata: c\n\n"))
    assert (ids.last, ids.lost, ids.doubled) == ("2", 0, 0)


def _timeline(times_ms: list[float], reconnects: list[object] | None) -> Timeline:
    events = [(int(t * MS), "x", 1, EventKind.CONTENT) for t in times_ms]
    timeline = Timeline.from_events(events, stream_id="s", outcome=Outcome.COMPLETE)
    if reconnects is not None:
        timeline.meta["reconnects"] = reconnects
    return timeline


def test_the_felt_gap_runs_from_the_last_text_before_the_drop_to_the_first_after() -> None:
    back = Reconnect(dropped_ns=105 * MS, last_event_id="3", asked_ns=2105 * MS)
    back.first_ns, back.status, back.replayed = 2110 * MS, 200, 5
    lost = Reconnect(dropped_ns=50 * MS, last_event_id="1", error="HTTP 410 Gone: expired")
    summary = reconnect_summary(
        [
            _timeline([10, 60, 100, 2110, 2111, 2150], [back.as_meta()]),
            _timeline([10, 40, 70], [lost.as_meta()]),
            _timeline([10, 20], None),
        ]
    )
    assert summary is not None
    assert (summary.streams, summary.reconnects, summary.failed) == (2, 2, 1)
    assert summary.felt_gap_ms == (2010.0,)
    assert summary.worst_felt_ms == 2010.0
    assert reconnect_summary([_timeline([1, 2], None)]) is None


def _reconnected_run(tmp_path: Path, *, lost: int) -> Path:
    back = Reconnect(dropped_ns=105 * MS, last_event_id="3", asked_ns=405 * MS)
    back.first_ns, back.status, back.lost = 410 * MS, 200, lost
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_timeline([10, 60, 100, 410, 411, 450], [back.as_meta()])])
    return path


def test_analyze_says_what_the_returning_readers_felt(tmp_path: Path) -> None:
    whole = runner.invoke(app, ["analyze", str(_reconnected_run(tmp_path, lost=0))])
    assert whole.exit_code == 0, whole.output
    line = " ".join(whole.output.split())
    assert "reconnects: 1 in 1 streams, nothing lost or doubled" in line
    assert "median 310" in line  # ms: the last text before the drop to the first after
    torn = runner.invoke(app, ["analyze", str(_reconnected_run(tmp_path, lost=2)), "--json"])
    assert torn.exit_code == 0, torn.output
    reconnects = orjson.loads(torn.output)["reconnects"]
    assert reconnects["events_lost"] == 2
    assert reconnects["felt_gap_max_s"] == pytest.approx(0.31)
    plain = runner.invoke(app, ["analyze", str(_reconnected_run(tmp_path, lost=0)), "--json"])
    assert orjson.loads(plain.output)["reconnects"]["not_resumed"] == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("  ", "empty"),
        ("after=40tok,", "empty field"),
        ("after=40", "after='40' needs a unit"),  # 40 chunks or 40 seconds? say which
        ("after=-1s", "after='-1s'"),
        ("after=40tok,back=-1s", "--disconnect back"),
        ("after=40tok,back=1e9s", "back='1e9s'"),
        ("after=1e9s", "after='1e9s'"),
        ("after=10000001tok", "after='10000001tok'"),
        ("after=" + "9" * 5000 + "tok", "characters long"),  # never Python's int limit
        ("after=４０tok", "after='４０tok'"),  # fullwidth digits: not read as 40
        ("after=40tok,share=١", "share='١'"),
        ("after=40tok,share=25%", "share='25%'"),
        ("after=40tok,share=-0.1", "share='-0.1'"),
    ],
)
def test_a_hostile_spec_gets_one_clear_line(text: str, words: str) -> None:
    with pytest.raises(SpecError, match="--disconnect") as caught:
        DisconnectPolicy.parse(text)
    message = str(caught.value)
    assert words in message
    assert len(message) < 300  # a long spec is not echoed whole


def test_odd_but_meaningful_specs_do_what_the_docs_say() -> None:
    assert DisconnectPolicy.parse("after=40tok,back=2").plan.back_ns == 2_000 * MS  # seconds
    assert DisconnectPolicy.parse("after=0tok,back=0s").plan.back_ns == 0  # at once
    assert DisconnectPolicy.parse("after=1.5s").plan.after.after_ns == 1_500 * MS
    assert DisconnectPolicy.parse("AFTER=40TOK , Share=1").plan.after.after_tokens == 40
    assert DisconnectPolicy.parse("after=40tok,back=1h").plan.back_ns == 3_600_000 * MS


def _entry(**changes: object) -> dict[str, object]:
    back = Reconnect(dropped_ns=25 * MS, last_event_id="3", asked_ns=300 * MS)
    back.first_ns, back.status, back.replayed = 400 * MS, 200, 2
    return {**back.as_meta(), **changes}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"lost": "2"}, "lost"),  # read as 0 it would say nothing was lost
        ({"doubled": 1.5}, "doubled"),
        ({"lost": True}, "lost"),
        ({"lost": -1}, "lost"),
        ({"dropped_ms": "x"}, "dropped_ms"),
        ({"dropped_ms": float("nan")}, "dropped_ms"),
        ({"dropped_ms": float("inf")}, "dropped_ms"),
        ({"first_ms": "x"}, "first_ms"),
        ({"status": "200"}, "status"),
        ({"error": 5}, "error"),
    ],
)
def test_a_reconnect_field_of_the_wrong_type_is_named(
    changes: dict[str, object], field: str
) -> None:
    timeline = _timeline([10, 20, 30, 400, 410], [_entry(**changes)])
    with pytest.raises(TimelineFormatError) as caught:
        reconnect_summary([timeline])
    assert caught.value.field == f"meta.reconnects[0].{field}"
    assert "'s'" in str(caught.value)  # the stream


@pytest.mark.parametrize("reconnects", ["x", {"lost": 1}, ["junk"], [5]])
def test_reconnects_that_are_not_a_list_of_objects_are_named(reconnects: object) -> None:
    with pytest.raises(TimelineFormatError, match="reconnects"):
        reconnect_summary([_timeline([1, 2, 3], reconnects)])  # type: ignore[arg-type]


def test_a_return_answered_with_an_error_status_is_not_resumed() -> None:
    # written by another tool: a 410 without an error message, a first event even
    summary = reconnect_summary([_timeline([10, 20, 30, 400, 410], [_entry(status=410)])])
    assert summary is not None
    assert (summary.reconnects, summary.failed) == (1, 1)


def test_a_return_whose_stream_then_failed_is_not_whole() -> None:
    # a record made before the client wrote the error: the stream's outcome says it
    timeline = _timeline([10, 20, 30, 400], [_entry()])
    timeline.outcome, timeline.error = Outcome.ERROR, "the stream was cancelled"
    summary = reconnect_summary([timeline])
    assert summary is not None
    assert summary.failed == 1


def test_a_drop_before_any_text_is_felt_from_the_request() -> None:
    early = _entry(dropped_ms=3.0, last_event_id=None, first_ms=300.0)
    summary = reconnect_summary([_timeline([300, 310, 320], [early])])
    assert summary is not None
    assert summary.felt_gap_ms == (300.0,)  # nothing shown until the first text after


def test_analyze_says_nothing_of_reconnects_when_there_were_none(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_timeline([10, 20, 30], None)])
    shown = runner.invoke(app, ["analyze", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "reconnect" not in shown.output
    as_json = runner.invoke(app, ["analyze", str(path), "--json"])
    assert orjson.loads(as_json.output)["reconnects"] is None


def test_analyze_counts_many_returns_and_each_failure(tmp_path: Path) -> None:
    timelines = []
    for i in range(40):
        entry = _entry(dropped_ms=25.0, first_ms=400.0 + i)
        timelines.append(_timeline([10, 20, 400 + i, 450 + i], [entry]))
        timelines[-1].stream_id = f"s{i}"
    gone = _entry(first_ms=None, status=410, error="HTTP 410 Gone: expired")
    timelines.append(_timeline([10, 20], [gone]))
    timelines[-1].stream_id = "gone"
    timelines[-1].end_ns = 310 * MS  # (the refusal of its return came at 310 ms)
    path = tmp_path / "run.jsonl"
    write_jsonl(path, timelines)
    shown = runner.invoke(app, ["analyze", str(path)])
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    assert (
        "reconnects: 41 in 41 streams, not whole: 0 events lost, 0 doubled, 1 not resumed" in line
    )
    assert "worst 419" in line  # ms: the last return's wait from 20 ms to 439 ms
    summary = orjson.loads(runner.invoke(app, ["analyze", str(path), "--json"]).output)
    assert summary["reconnects"]["reconnects"] == 41
    assert summary["reconnects"]["not_resumed"] == 1


def test_analyze_names_a_bad_reconnect_field_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [_timeline([10, 20, 400], [_entry(lost="2")])])
    shown = runner.invoke(app, ["analyze", str(path)])
    assert shown.exit_code == 2, shown.output
    assert "meta.reconnects[0].lost" in shown.output
    assert shown.exception is None or isinstance(shown.exception, SystemExit)


def test_an_id_carried_over_to_an_event_of_its_own_is_no_double() -> None:
    # The gateway's closing in-band error has no id: line: SSE carries the last id over.
    ids = EventIds()
    ids.see(_items(b"id: 1\ndata: a\n\nid: 2\ndata: b\n\n"))
    ids.see(_items(b'event: error\ndata: {"error": "cut"}\n\n'))
    assert (ids.seen, ids.lost, ids.doubled) == (2, 0, 0)
    ids.see(_items(b"id: 2\ndata: b\n\n"))  # the same event again: a double
    assert ids.doubled == 1


def test_a_new_connection_carries_no_id_over() -> None:
    ids = EventIds()
    ids.see(_items(b"id: 3\ndata: c\n\n"))
    ids.reconnected()
    ids.see(_items(b"id: 3\ndata: c\n\nid: 4\ndata: d\n\n"))  # the return replays 3
    assert (ids.seen, ids.doubled, ids.last) == (3, 1, "4")


def test_drops_cut_short_by_the_runs_end_are_not_judged() -> None:
    cut = _entry(asked_ms=None, first_ms=None, status=None, interrupted=True)
    failed = _timeline([10, 20], None)
    failed.outcome, failed.meta["disconnect"] = Outcome.ERROR, "after 40 tokens, back 2000ms"
    ended = _timeline([10, 20], None)
    ended.meta["disconnect"] = "after 40 tokens, back 2000ms"
    summary = reconnect_summary([_timeline([10, 20, 30], [cut]), failed, ended])
    assert summary is not None
    assert (summary.reconnects, summary.failed, summary.interrupted) == (0, 0, 1)
    assert summary.ended_before_drop == 1  # (the stream that failed is not one of them)


@pytest.mark.parametrize(
    ("entries", "field"),
    [
        ([{"dropped_ms": -500.0}], "[0].dropped_ms"),
        ([{"dropped_ms": 9000.0}], "[0].dropped_ms"),  # past the stream's end
        ([{"dropped_ms": None}], "[0].dropped_ms"),
        ([{"first_ms": 20.0}], "[0].first_ms"),  # before its drop
        ([{"asked_ms": -3.0}], "[0].asked_ms"),
        ([{}, {}], "[1].dropped_ms"),  # the same drop twice: before the first's return
        ([{}, {"dropped_ms": 100.0}], "[1].dropped_ms"),
    ],
)
def test_reconnects_out_of_time_are_named(entries: list[dict[str, object]], field: str) -> None:
    timeline = _timeline([10, 20, 30, 400, 410], [_entry(**changes) for changes in entries])
    with pytest.raises(TimelineFormatError) as caught:
        reconnect_summary([timeline])
    assert caught.value.field == f"meta.reconnects{field}"
