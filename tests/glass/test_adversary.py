"""The glass intake against hostile reports: text where numbers go, ids with line breaks, and
a flood of the largest posts, each of which the replay keeps in memory."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from steadystream._api_errors import ApiError, is_client_id
from steadystream.glass.intake import GlassLimits, parse_report
from steadystream.replay import app as replay_app
from steadystream.replay import create_app
from tests.support.timelines import make_timeline


def report(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schema": "steadystream.glass/1",
        "stream_id": "page-1",
        "started_at": 1_767_225_600.0,
        "first_byte_ms": 10.0,
        "end_ms": 120.0,
        "arrivals": [[20.0, 1], [40, 2]],  # an integral time may come as a JSON integer
        "frames": [[25.0, 1], [50.0, 2]],
    }
    body.update(changes)
    return body


def refusal(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_report(orjson.dumps(body), GlassLimits())
    return caught.value


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({"arrivals": [["20.0", 1], [40.0, 2]]}, "arrivals.0.0"),
        ({"arrivals": [[20.0, True], [40.0, 2]]}, "arrivals.0.1"),
        ({"frames": [[25.0, "1"]]}, "frames.0.1"),
        ({"arrivals": [["NaN", 1]]}, "arrivals.0.0"),
        ({"started_at": "inf"}, "started_at"),
        ({"first_byte_ms": "NaN"}, "first_byte_ms"),
        ({"end_ms": False}, "end_ms"),
    ],
)
def test_text_where_a_number_goes_is_refused_naming_the_field(
    changes: dict[str, Any], param: str
) -> None:
    error = refusal(report(**changes))  # old code: pydantic's lax mode read them as numbers
    assert (error.status, error.param) == (400, param)
    assert "valid number" in error.message or "valid integer" in error.message


@pytest.mark.parametrize("stream_id", ["page-1\n", "page-1\r\n", "\npage-1"])
def test_a_stream_id_with_a_line_break_is_refused(stream_id: str) -> None:
    error = refusal(report(stream_id=stream_id))
    assert (error.status, error.param) == (400, "stream_id")


def test_one_rule_for_the_ids_clients_choose() -> None:
    # The gateway's X-Request-Id, the replay's and a page's stream id: the whole value.
    for good in ("r-1", "a" * 128, "chatcmpl.1:2_3"):
        assert is_client_id(good)
    for bad in ("", "a" * 129, "r-1\n", "\nr-1", "r 1", "r/1", "é"):
        assert not is_client_id(bad)


def test_a_good_report_with_integral_times_is_taken() -> None:
    client, glass = parse_report(orjson.dumps(report()), GlassLimits()).timelines(keep_text=False)
    assert client.times.tolist() == [20_000_000, 40_000_000]
    assert glass.tokens.tolist() == [1, 2]


def test_the_replay_keeps_reports_within_an_event_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_app, "_KEEP_GLASS_EVENTS", 100)
    app = create_app([make_timeline([10.0, 20.0], stream_id="rec")])
    state = app.state.replay
    events = [[float(i), 1] for i in range(20)]
    with TestClient(app) as http:
        for n in range(10):
            body = report(stream_id=f"page-{n}", arrivals=events, frames=events)
            assert http.post("/steadystream/glass", content=orjson.dumps(body)).status_code == 204
    # each post is two timelines of 20 events: the newest five (100 events) are kept
    kept = [t.stream_id for t in state.glass]
    assert sum(len(t) for t in state.glass) == state.glass_events <= 100
    assert kept == ["page-7", "page-8", "page-8", "page-9", "page-9"]


def test_the_replay_keeps_at_most_its_count_of_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_app, "_KEEP_GLASS", 3)
    state = create_app([make_timeline([10.0, 20.0], stream_id="rec")]).state.replay
    for n in range(5):
        state.keep_glass([make_timeline([1.0], stream_id=f"g-{n}")])
    assert [t.stream_id for t in state.glass] == ["g-2", "g-3", "g-4"]
    assert state.glass_events == 3 * len(make_timeline([1.0]))


def test_the_text_limit_counts_bytes_not_characters() -> None:
    limits = GlassLimits(max_text_bytes=1024)
    emoji = "\N{GRINNING FACE}" * 200  # 200 characters, 800 bytes
    body = report(texts=[emoji, emoji])  # 1,600 bytes: over, though 400 characters are not
    with pytest.raises(ApiError) as caught:
        parse_report(orjson.dumps(body), limits)
    assert (caught.value.status, caught.value.param) == (413, "texts")
    fits = report(texts=[emoji, "ok"])
    assert parse_report(orjson.dumps(fits), limits).texts == [emoji, "ok"]
