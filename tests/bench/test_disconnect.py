"""bench --disconnect: the spec, the ids a return is judged by, and what analyze reports."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream._exceptions import SpecError
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


def _items(wire: bytes) -> list:
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


def _timeline(times_ms: list[float], reconnects: list | None) -> Timeline:
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


def test_a_hand_edited_reconnect_entry_is_not_trusted() -> None:
    summary = reconnect_summary(
        [_timeline([1, 2, 3], ["junk", {"dropped_ms": "x", "first_ms": 2, "lost": -4}])]
    )
    assert summary is not None
    assert (summary.reconnects, summary.lost, summary.felt_gap_ms) == (1, 0, ())


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
