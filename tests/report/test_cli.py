"""`steadystream report` end to end through typer's runner, images included."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.report import CHART_IDS
from tests.support.report import SAMPLE_RUN, steady

_register()
runner = CliRunner()


@pytest.fixture
def baseline_file(tmp_path: Path) -> Path:
    path = tmp_path / "base.jsonl"
    write_jsonl(path, [steady(f"b{i}", [20.0] * 60) for i in range(3)])
    return path


def test_report_with_baseline_and_whatif(tmp_path: Path, baseline_file: Path) -> None:
    out = tmp_path / "report.html"
    args = ["report", str(SAMPLE_RUN), "--baseline", str(baseline_file), "-o", str(out)]
    result = runner.invoke(app, [*args, "--whatif", "leaky", "--whatif", "rechunk"])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert "30 streams, 6 charts, 4 findings" in result.output  # the stall cause is one
    page = out.read_text()
    assert "of stall time" in page
    assert "stall cause" in page
    assert "<title>Stream report: sample-run.jsonl</title>" in page
    assert "3 streams from base.jsonl" in page
    assert page.count("<tr><td>") == 3  # as recorded, leaky, rechunk


def test_experience_model_options_reach_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    models = ["--qoe-pace", "20ms", "--fluidity-form", "code", "--fluidity-deadline", "20ms"]
    result = runner.invoke(app, ["report", str(SAMPLE_RUN), "-o", str(out), *models])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "read at 20.0ms a token (exact form)" in page
    assert "50.0ms after (code form)" not in page
    assert "20.0ms after (code form)" in page
    bad = runner.invoke(app, ["report", str(SAMPLE_RUN), "-o", str(out), "--qoe-form", "x"])
    assert bad.exit_code == 2
    assert "--qoe-form" in bad.output


def test_bad_pacer_spec_is_a_clean_error(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(SAMPLE_RUN), "-o", str(out), "--whatif", "nope"])
    assert result.exit_code == 2
    assert "unknown pacer 'nope'" in result.output
    assert not out.exists()


def test_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    out = str(tmp_path / "report.html")  # (not ./report.html: whatever the directory holds)
    result = runner.invoke(app, ["report", str(tmp_path / "absent.jsonl"), "-o", out])
    assert result.exit_code == 2
    assert "cannot read" in result.output


def test_images(tmp_path: Path, chromium: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEADYSTREAM_CHROMIUM", chromium)
    images = tmp_path / "charts"
    out = tmp_path / "report.html"
    result = runner.invoke(
        app, ["report", str(SAMPLE_RUN), "-o", str(out), "--images", str(images)]
    )
    assert result.exit_code == 0, result.output
    assert f"wrote 12 images to {images}" in result.output
    for chart_id in CHART_IDS:
        png = (images / f"{chart_id}.png").read_bytes()
        svg = (images / f"{chart_id}.svg").read_text()
        assert png.startswith(b"\x89PNG\r\n\x1a\n"), chart_id
        assert len(png) > 5_000, chart_id
        assert svg.startswith("<svg"), chart_id
        assert svg.rstrip().endswith("</svg>"), chart_id
        assert "main-svg" in svg


def test_images_without_chromium_say_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEADYSTREAM_CHROMIUM", str(tmp_path / "no-such-browser"))
    out = tmp_path / "report.html"
    result = runner.invoke(
        app, ["report", str(SAMPLE_RUN), "-o", str(out), "--images", str(tmp_path / "charts")]
    )
    assert result.exit_code == 2
    assert "no Chromium found" in result.output
    assert "apt-get install chromium" in result.output
    assert out.exists()  # the report itself was written first
