"""What `analyze` and `explain` read: no engine metrics, each file once, no pipes."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import InputError
from steadystream.analysis import timeline_files
from steadystream.cli import _register, app
from steadystream.engine_metrics import SCHEMA, gateway_metrics_path, sidecar_path
from steadystream.files import write_jsonl
from tests.support.attribution import GAP, cadence, stream

_register()
runner = CliRunner()


def scrapes(path: Path) -> None:
    line = {"schema": SCHEMA, "t": 1_767_225_600.0, "source": "x", "values": {"a": 1.0}}
    path.write_bytes(orjson.dumps(line) + b"\n")


def test_a_folder_walk_skips_engine_metrics_by_either_name(tmp_path: Path) -> None:
    run = tmp_path / "gateway-1.jsonl"
    write_jsonl(run, [stream(cadence(30, 5), stream_id="a")])
    scrapes(gateway_metrics_path(tmp_path, "lab"))  # the gateway's, per upstream
    scrapes(sidecar_path(run))  # bench's, beside its run
    assert timeline_files([tmp_path]) == [run]
    result = runner.invoke(app, ["analyze", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output)["fleet"]["streams"] == 1
    # named outright, the gateway's file is still engine metrics to explain
    named = gateway_metrics_path(tmp_path, "lab")
    result = runner.invoke(app, ["explain", str(run), "--engine-metrics", str(named), "--json"])
    assert result.exit_code == 0, result.output
    assert any("engine metrics: 1 scrapes" in n for n in orjson.loads(result.output)["notes"])


def test_a_file_reached_twice_is_taken_once_at_its_first_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, other = tmp_path / "base.jsonl", tmp_path / "other.jsonl"
    write_jsonl(base, [stream(GAP, stream_id="a")])
    write_jsonl(other, [stream(cadence(30, 5), stream_id="b")])
    (tmp_path / "latest.jsonl").symlink_to(base)
    monkeypatch.chdir(tmp_path)
    notes: list[str] = []
    assert timeline_files(["other.jsonl", "./base.jsonl", base, tmp_path], notes) == [
        Path("other.jsonl"),
        Path("./base.jsonl"),
    ]
    assert notes == ["4 names of files already named were skipped: each is read once"]
    for command in ("analyze", "explain"):
        result = runner.invoke(app, [command, "base.jsonl", "base.jsonl", "--json"])
        assert result.exit_code == 0, result.output
        data = orjson.loads(result.output)
        assert "1 file named twice was read once" in data["notes"]
        streams = data["fleet"]["streams"] if command == "analyze" else data["streams"]
        assert streams == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_named_is_refused_and_skipped_in_a_folder(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [stream(cadence(30, 5), stream_id="a")])
    os.mkfifo(tmp_path / "p.jsonl")
    with pytest.raises(InputError, match=r"p\.jsonl: not a regular file or a folder"):
        timeline_files([tmp_path / "p.jsonl"])
    notes: list[str] = []
    assert timeline_files([tmp_path], notes) == [tmp_path / "a.jsonl"]
    assert "not a regular file" in notes[0]
    result = runner.invoke(app, ["analyze", str(tmp_path / "p.jsonl")])
    assert result.exit_code == 2
    assert "p.jsonl: not a regular file or a folder" in " ".join(result.output.split())
