"""bench --cancel-after: hostile values get one clear line, valid ones keep their meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream._exceptions import SpecError
from steadystream.bench.cancel import CancelPoint
from steadystream.cli import _register, app

MS = 1_000_000

_register()
runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "'' is not a point"),
        ("soon", "'soon' is not a point (examples: 20tok, 500ms, 1.5s)"),
        ("20", "'20' needs a unit: 20tok (content chunks) or 20s"),  # chunks or seconds?
        ("1.5", "'1.5' needs a unit: 1.5s"),
        ("-1s", "'-1s'"),
        ("1e9s", "'1e9s' is longer than an hour"),
        ("2h", "'2h' is longer than an hour"),
        ("10000001tok", "'10000001tok' is past any answer"),
        ("9" * 5000 + "tok", "5003 characters long"),  # never Python's int limit
        ("9" * 5000 + "s", "5001 characters long"),
        ("４０tok", "'４０tok'"),  # fullwidth digits: not read as 40
        ("٤٠tok", "'٤٠tok'"),  # Arabic-Indic digits
        ("٤٠ms", "'٤٠ms'"),
        ("20\u00a0tok", "tok'"),  # a no-break space is not white space here
    ],
)
def test_a_hostile_cancel_point_gets_one_clear_line(text: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        CancelPoint.parse(text)
    message = str(caught.value)
    assert message.startswith("--cancel-after: ")
    assert words in message
    assert "\n" not in message
    assert len(message) < 200  # a long value is not echoed whole
    assert "limit" not in message  # (Python's "Exceeds the limit (4300 digits)")


def test_valid_cancel_points_keep_their_documented_meaning() -> None:
    assert CancelPoint.parse("20tok") == CancelPoint(after_tokens=20)
    assert CancelPoint.parse(" 20 TOKENS ") == CancelPoint(after_tokens=20)
    assert CancelPoint.parse("0tok") == CancelPoint(after_tokens=0)
    assert CancelPoint.parse("10000000tok") == CancelPoint(after_tokens=10_000_000)
    assert CancelPoint.parse("500ms") == CancelPoint(after_ns=500 * MS)
    assert CancelPoint.parse("1.5s") == CancelPoint(after_ns=1_500 * MS)
    assert CancelPoint.parse("1h") == CancelPoint(after_ns=3_600_000 * MS)


@pytest.mark.parametrize("value", ["9" * 5000 + "tok", "٤٠tok", "20"])
def test_bench_names_a_hostile_cancel_after_without_a_traceback(tmp_path: Path, value: str) -> None:
    out = tmp_path / "r.jsonl"
    args = ["bench", "http://127.0.0.1:9/v1", "-m", "lab", "-o", str(out), "--no-live"]
    shown = runner.invoke(app, [*args, "--cancel", "0.5", "--cancel-after", value])
    assert shown.exit_code == 2, shown.output
    assert "--cancel-after" in shown.output
    assert "Traceback" not in shown.output
    assert "9999999999" not in shown.output
    assert shown.exception is None or isinstance(shown.exception, SystemExit)
    assert not out.exists()
