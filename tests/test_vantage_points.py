"""One stream recorded at several vantage points counts once; two runs reusing an id, twice."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Where
from steadystream.attribution.streams import stream_numbers
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from tests.support.attribution import GAP, cadence, gateway_folder, stream

_register()
runner = CliRunner()
UP, DOWN = Where.GATEWAY_UPSTREAM, Where.GATEWAY_DOWNSTREAM


def test_stream_numbers_join_edges_across_files_and_part_reused_ids() -> None:
    ids = ["a", "a", "c", "c", "a", "a"]
    wheres = ["gateway-upstream", "gateway-downstream", "gateway-upstream"]
    wheres += ["gateway-downstream", "client", "client"]
    # c's edges in files 0 and 1 join; a at the client in two files is two streams, and
    # the first of them joins the gateway's a
    assert stream_numbers(ids, wheres, [0, 0, 0, 1, 1, 2]) == [0, 0, 1, 1, 0, 2]


@pytest.mark.parametrize("command", ["analyze", "explain"])
def test_a_gateway_recording_counts_each_request_once(tmp_path: Path, command: str) -> None:
    result = runner.invoke(app, [command, str(gateway_folder(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    if command == "analyze":
        assert data["fleet"]["streams"] == 4  # a, b, c downstream; d upstream
        assert (
            "4 streams as the gateway-downstream and gateway-upstream saw them;"
            " 3 gateway-upstream timelines of the same streams left out"
        ) in data["notes"]
    else:
        assert data["streams"] == 4
        assert [s["where"] for s in data["stalls"]] == ["gateway-downstream"]


def test_a_plain_run_is_analysed_as_before(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [stream(GAP, stream_id="a"), stream(cadence(30, 20), stream_id="b")])
    data = orjson.loads(runner.invoke(app, ["analyze", str(path), "--json"]).output)
    assert data["fleet"]["streams"] == 2
    assert not any("saw them" in note for note in data["notes"])


def test_two_runs_that_reuse_an_id_stay_two_streams(tmp_path: Path) -> None:
    first, second = tmp_path / "run1.jsonl", tmp_path / "run2.jsonl"
    write_jsonl(first, [stream(GAP, stream_id="paused-3")])
    write_jsonl(second, [stream(GAP, stream_id="paused-3", start_ms=600_000)])
    result = runner.invoke(app, ["explain", str(first), str(second), "--json"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert data["streams"] == 2
    hurt = data["most_hurt"]
    assert [(h["stream_id"], h["stalls"]) for h in hurt] == [("paused-3", 1), ("paused-3", 1)]
    result = runner.invoke(app, ["analyze", str(first), str(second), "--json"])
    assert orjson.loads(result.output)["fleet"]["streams"] == 2
