"""`analyze`, `explain`, `gate`, `report` and `whatif` read peers' files directly."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from tests.support.peers import DATA

_register()
runner = CliRunner()

VLLM = str(DATA / "vllm_bench_detailed.json")
AIPERF = str(DATA / "aiperf_profile_export.jsonl")
GENAI = str(DATA / "genai_perf_profile_export.json")


def test_analyze_names_the_freeze_a_vllm_run_recorded() -> None:
    result = runner.invoke(app, ["analyze", VLLM, "--json"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    worst = data["worst_streams"][0]
    assert worst["stream_id"] == "vllm-1"
    assert worst["max_gap_s"] == pytest.approx(1.5)
    assert data["fleet"]["token_sources"] == {
        "exact": 1,
        "usage-one-per-event": 2,
        "usage-even": 1,
    }


def test_analyze_with_a_named_format(tmp_path: Path) -> None:
    renamed = tmp_path / "export.data"
    renamed.write_bytes(Path(AIPERF).read_bytes())
    result = runner.invoke(app, ["analyze", str(renamed), "--format", "aiperf", "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output)["fleet"]["streams"] == 2


def test_a_bad_format_is_a_usage_error() -> None:
    result = runner.invoke(app, ["analyze", VLLM, "--format", "jmeter"])
    assert result.exit_code == 2
    assert "--format" in result.output
    assert "genai-perf" in result.output


def test_format_and_ray_together_are_refused() -> None:
    result = runner.invoke(app, ["explain", VLLM, "--format", "vllm", "--ray"])
    assert result.exit_code == 2
    assert "leave --format out" in result.output


def test_explain_reads_a_genai_perf_export() -> None:
    result = runner.invoke(app, ["explain", GENAI, "--json"])
    assert result.exit_code == 0, result.output
    (stall,) = orjson.loads(result.output)["stalls"]
    assert stall["stream_id"] == "genai-perf-0-0"
    assert stall["text_index"] == 4  # the 1.2 s pause before the fifth word


def test_gate_compares_two_peers_runs() -> None:
    result = runner.invoke(app, ["gate", VLLM, GENAI, "--json"])
    assert result.exit_code in (0, 1, 4), result.output
    data = orjson.loads(result.output)
    assert data["streams"] == {"baseline": 4, "current": 2}


def test_whatif_paces_an_aiperf_run() -> None:
    result = runner.invoke(app, ["whatif", AIPERF, "--pacer", "leaky", "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output)["streams"] == 2


def test_report_of_a_vllm_run(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", VLLM, "-o", str(out), "--format", "vllm"])
    assert result.exit_code == 0, result.output
    assert "4 streams" in result.output
    assert out.stat().st_size > 0


def test_guidellm_is_refused_with_what_is_missing() -> None:
    result = runner.invoke(app, ["analyze", str(DATA / "guidellm_benchmarks.json")])
    assert result.exit_code == 2
    assert "no stream's gaps can be rebuilt" in result.output
