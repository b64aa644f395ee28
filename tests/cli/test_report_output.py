"""`report` without `-o` never overwrites ./report.html silently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from tests.support.timelines import paused_stream, steady_stream

_register()
runner = CliRunner()


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a run in it, and the report of an earlier run."""
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "run.jsonl", [steady_stream(), paused_stream()])
    (tmp_path / "report.html").write_text("the report of an earlier run")
    return tmp_path


def test_an_existing_report_is_kept_and_the_error_says_what_to_do(here: Path) -> None:
    result = runner.invoke(app, ["report", "run.jsonl"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.replace("│", " ").split())
    assert "report.html exists: name another file with -o FILE, or overwrite it with --force" in (
        text
    )
    assert (here / "report.html").read_text() == "the report of an earlier run"


def test_force_overwrites_it(here: Path) -> None:
    result = runner.invoke(app, ["report", "run.jsonl", "--force"])
    assert result.exit_code == 0, result.output
    assert "wrote report.html" in result.output
    assert (here / "report.html").read_text().startswith("<!doctype html>")


def test_a_file_named_with_o_is_written(here: Path) -> None:
    result = runner.invoke(app, ["report", "run.jsonl", "-o", "other.html"])
    assert result.exit_code == 0, result.output
    assert (here / "other.html").is_file()
    assert (here / "report.html").read_text() == "the report of an earlier run"


@pytest.mark.parametrize(
    ("output", "said"),
    [("folder", "a folder"), ("fifo.html", "not a regular file"), ("no/such/r.html", "not exist")],
)
def test_an_output_that_cannot_be_written_is_refused_before_reading(
    here: Path, output: str, said: str
) -> None:
    (here / "folder").mkdir()
    os.mkfifo(here / "fifo.html")  # (a write would wait for a reader forever)
    result = runner.invoke(app, ["report", "run.jsonl", "-o", output])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.replace("│", " ").split())
    assert result.exception is None or isinstance(result.exception, SystemExit)
