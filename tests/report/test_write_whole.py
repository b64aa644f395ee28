"""A report is written whole or not at all: a failed write keeps the report that was there."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.report import build_report, write_report
from tests.support.timelines import paused_stream, steady_stream

_register()
runner = CliRunner()


def test_a_failed_write_keeps_the_report_that_was_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.html"
    report = build_report([steady_stream(), paused_stream()])
    size = write_report(report, path)
    before = path.read_bytes()
    assert len(before) == size

    def full_disk(self: Path, data: bytes) -> int:
        with self.open("wb") as file:
            file.write(data[: len(data) // 3])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_report(report, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # (no leftover)

    run = tmp_path / "run.jsonl"
    monkeypatch.undo()
    write_jsonl(run, [steady_stream()])
    monkeypatch.setattr(Path, "write_bytes", full_disk)
    result = runner.invoke(app, ["report", str(run), "-o", str(path)])
    assert result.exit_code == 2, result.output
    assert f"cannot write {path}: No space left on device" in " ".join(result.output.split())
    assert path.read_bytes() == before
