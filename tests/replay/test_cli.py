"""`steadystream replay` and `steadystream glass` refuse bad input before serving anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import write_timelines
from tests.support.report import SAMPLE_RUN
from tests.support.timelines import make_timeline

_register()


def test_replay_names_the_bad_part_of_a_bad_injection() -> None:
    result = CliRunner().invoke(
        app, ["replay", str(SAMPLE_RUN), "--inject", "pause:2s@50%", "--inject", "pause:2q@50%"]
    )
    assert result.exit_code == 2
    assert "pause:2q@50%" in result.output
    assert "'2q'" in result.output


def test_replay_refuses_a_run_with_nothing_to_play(tmp_path: Path) -> None:
    empty = tmp_path / "roles.jsonl"
    write_timelines(empty, [make_timeline([], stream_id="no-text")])
    result = CliRunner().invoke(app, ["replay", str(empty)])
    assert result.exit_code == 2
    assert "no text event" in result.output
    result = CliRunner().invoke(app, ["replay", str(SAMPLE_RUN), "--where", "lab"])
    assert result.exit_code == 2
    assert "no 'lab' timelines" in result.output


def test_replay_says_its_run_was_cut_off_and_plays_its_complete_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[int] = []
    monkeypatch.setattr(
        "steadystream.replay.server.serve", lambda timelines, **_: served.append(len(timelines))
    )
    cut = tmp_path / "cut.jsonl"
    whole = SAMPLE_RUN.read_bytes()
    cut.write_bytes(whole + whole[:40])  # a recorder that crashed mid-line
    result = CliRunner().invoke(app, ["replay", str(cut)])
    assert result.exit_code == 0, result.output
    assert "was cut off mid-record" in result.output
    assert served == [whole.count(b"\n")]


def test_glass_without_chromium_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEADYSTREAM_CHROMIUM", str(tmp_path / "no-such-browser"))
    page = tmp_path / "page.html"
    page.write_text("<!doctype html>")
    result = CliRunner().invoke(
        app, ["glass", str(page), "--replay", str(SAMPLE_RUN), "-o", str(tmp_path / "g.jsonl")]
    )
    assert result.exit_code == 2
    assert "apt-get install chromium" in result.output
    assert not (tmp_path / "g.jsonl").exists()


def test_replay_says_a_record_path_it_cannot_write_in_one_line(tmp_path: Path) -> None:
    # A folder was an IsADirectoryError traceback, exit 1, as the lab's was.
    for record in (tmp_path, tmp_path / "missing" / "truth.jsonl"):
        result = CliRunner().invoke(
            app, ["replay", str(SAMPLE_RUN), "--record", str(record), "--port", "0"]
        )
        assert result.exit_code == 2, result.output
        assert "--record: cannot write" in result.output
        assert "Traceback" not in result.output
