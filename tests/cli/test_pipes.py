"""Output into a pipe keeps every value whole: full stream ids and outcomes, notes on one line.

A pipe has no terminal width (``COLUMNS`` is not set there): rich used to take 80 columns and
cut ``ss953a1f2e3d-000042`` to ``ss953a…`` and ``complete`` to ``comple…``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from steadystream import Outcome, Timeline
from steadystream.bench.summary import summarise
from steadystream.cli import _register, app
from steadystream.cli._render import print_summary
from steadystream.files import write_jsonl
from steadystream.metrics import MetricConfig
from tests.support.timelines import make_timeline

_register()
runner = CliRunner()

# What a terminal-less run has in its environment (a CI job, a pipe); rich reads these.
_NO_TERMINAL = {"COLUMNS": None, "LINES": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None}


def bench_like_run() -> list[Timeline]:
    """Streams with ids as bench names them, a freeze in each, and long outcome words."""
    frozen = [20.0 * i for i in range(1, 20)] + [1400 + 20.0 * i for i in range(20, 40)]
    outcomes = [Outcome.COMPLETE, Outcome.CLIENT_STUCK, Outcome.FAILED_OVER]
    return [
        make_timeline(frozen, stream_id=f"ss953a1f2e3d-{k:06d}", outcome=outcomes[k % 3])
        for k in range(6)
    ]


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, bench_like_run())
    return path


def assert_whole(text: str) -> None:
    assert "…" not in text
    for k in range(6):
        assert f"ss953a1f2e3d-{k:06d}" in text
    for outcome in ("complete", "client-stuck", "failed-over"):
        assert f" {outcome} " in text


def test_analyze_into_a_pipe_keeps_ids_outcomes_and_notes_whole(run_file: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _NO_TERMINAL}
    piped = subprocess.run(
        [sys.executable, "-m", "steadystream", "analyze", str(run_file)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    ).stdout
    assert_whole(piped)
    # a note longer than 80 columns stays one line, as grep wants it
    (models,) = [line for line in piped.splitlines() if line.startswith("Andes QoE:")]
    assert models.endswith("(documented form)")
    assert len(models) > 80


@pytest.mark.parametrize("columns", [None, "80"])
def test_explain_into_a_pipe_keeps_every_row_on_one_line(
    run_file: Path, columns: str | None
) -> None:
    result = runner.invoke(
        app, ["explain", str(run_file)], env={**_NO_TERMINAL, "COLUMNS": columns}
    )
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    for row in rows:  # no row goes on over a second line with an empty stream cell
        assert row.split("│")[1].strip(), row
    for k in range(6):
        assert sum(f"ss953a1f2e3d-{k:06d}" in row for row in rows) == 2  # hurt, and its stall
    assert any(row.rstrip(" │").endswith("is the commonest") for row in rows)  # evidence whole


def test_an_80_column_terminal_folds_ids_and_outcomes_rather_than_cutting_them() -> None:
    summary = summarise(bench_like_run(), MetricConfig())
    buffer = io.StringIO()
    print_summary(summary, Console(file=buffer, force_terminal=True, width=80))
    shown = buffer.getvalue()
    assert "…" not in shown  # the id goes on over a second line where it must


def test_an_error_message_from_outside_cannot_drive_the_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Every command's "error: ..." may quote a server's or a file's text.
    from steadystream.cli._errors import print_error

    print_error("upstream said \x1b]0;owned\x07\x1b[2J [bold]x[/] in 'steadystream[ray]'\nnext")
    err = capsys.readouterr().err
    assert "\x1b]0;" not in err
    assert "\x1b[2J" not in err
    assert "[bold]x[/]" in err  # as written, not read as markup
    assert "steadystream[ray]" in err
    assert "\nnext" in err  # (a line break stays one)
