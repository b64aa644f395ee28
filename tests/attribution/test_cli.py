"""`steadystream explain` end to end through typer's runner, and `bench --engine-metrics`."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Where
from steadystream.cli import _register, app
from steadystream.engine_metrics import SCHEMA, sidecar_path
from steadystream.files import write_jsonl
from steadystream.lab import LabServer
from tests.support.attribution import T0, cadence, stream

_register()
runner = CliRunner()


def test_text_output_names_cause_evidence_and_mitigation(run: Path) -> None:
    result = runner.invoke(app, ["explain", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "1 stalls over 400.0ms in 2 streams" in result.output
    assert "Stall time by cause" in result.output
    assert "kv-preemption" in result.output
    assert "smaller batch" in result.output  # the mitigation
    assert "evidence" in result.output
    assert "sure" in result.output


def test_json_has_the_fields_the_issue_lists(run: Path) -> None:
    result = runner.invoke(app, ["explain", str(run), "--json"])
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.output)
    (stall,) = payload["stalls"]
    assert stall["stream_id"] == "a"
    assert stall["event_index"] == 11
    assert stall["end_ns"] - stall["start_ns"] == 600_000_000
    assert stall["duration_s"] == pytest.approx(0.6)
    assert stall["cause"] == "kv-preemption"
    assert 0 < stall["confidence"] <= 1
    assert stall["evidence"]
    assert payload["by_cause"]["kv-preemption"]["stalls"] == 1
    assert "truth" not in payload


def test_engine_metrics_beside_the_run_are_used(run: Path) -> None:
    lines = [
        {"schema": SCHEMA, "t": T0 + t / 10, "values": {"vllm:num_preemptions_total": float(t > 3)}}
        for t in range(20)
    ]
    sidecar_path(run).write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    result = runner.invoke(app, ["explain", str(run), "--json"])
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.output)
    assert payload["stalls"][0]["confidence"] == pytest.approx(0.9)
    assert "engine metrics (20 scrapes)" in payload["sources"]


def test_truth_adds_a_confusion_matrix(run: Path, tmp_path: Path) -> None:
    causes: list[str | None] = [None] * 20
    causes[10] = "connection-hiccup"
    truth = tmp_path / "truth.jsonl"
    write_jsonl(truth, [stream(cadence(20, 20), stream_id="a", where=Where.LAB, cause=causes)])
    result = runner.invoke(app, ["explain", str(run), "--truth", str(truth)])
    assert result.exit_code == 0, result.output
    assert "attributed right: 0.0% of 600.0ms" in result.output
    payload = orjson.loads(
        runner.invoke(app, ["explain", str(run), "--truth", str(truth), "--json"]).output
    )
    assert payload["truth"]["matrix_s"] == {
        "connection-hiccup": {"kv-preemption": pytest.approx(0.6)}
    }


def test_bad_input_exits_2_naming_it(run: Path, tmp_path: Path) -> None:
    missing = runner.invoke(app, ["explain", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2
    assert "nope.jsonl" in missing.output
    threshold = runner.invoke(app, ["explain", str(run), "--stall-threshold", "soon"])
    assert threshold.exit_code == 2
    assert "--stall-threshold" in threshold.output
    bad = tmp_path / "bad.engine-metrics.jsonl"
    bad.write_bytes(b'{"schema": "nope"}\n{}\n')
    metrics = runner.invoke(app, ["explain", str(run), "--engine-metrics", str(bad)])
    assert metrics.exit_code == 2
    assert "schema" in metrics.output


@pytest.mark.integration
def test_bench_scrapes_the_labs_metrics_beside_its_run(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    with LabServer("steady") as lab:
        args = ["bench", lab.base_url, "-m", "lab", "-o", str(out), "--no-live"]
        args += ["--requests", "4", "--concurrency", "2", "--max-tokens", "30", "--warmup", "0"]
        result = runner.invoke(app, [*args, "--engine-metrics", "auto"])
    assert result.exit_code == 0, result.output
    assert "engine metrics:" in result.output
    lines = [orjson.loads(x) for x in sidecar_path(out).read_bytes().splitlines()]
    assert len(lines) >= 2
    assert all(line["schema"] == SCHEMA for line in lines)
    assert "vllm:num_requests_running" in lines[-1]["values"]
    explained = runner.invoke(app, ["explain", str(out), "--json"])
    assert explained.exit_code == 0, explained.output
    # explain finds the scrapes beside the run by itself. (Whether a steady lab stalled in
    # real time depends on the machine's load: not asserted here; tests/lab holds its timing
    # in simulated time.)
    sources = orjson.loads(explained.output)["sources"]
    assert any(source.startswith("engine metrics (") for source in sources), sources


def test_bench_refuses_a_bad_engine_metrics_value(tmp_path: Path) -> None:
    args = ["bench", "http://127.0.0.1:9/v1", "-m", "lab", "-o", str(tmp_path / "r.jsonl")]
    result = runner.invoke(app, [*args, "--engine-metrics", "metrics"])
    assert result.exit_code == 2
    assert "--engine-metrics" in result.output


def test_analyze_no_explain_gives_the_metrics_without_causes(run: Path) -> None:
    full = orjson.loads(runner.invoke(app, ["analyze", str(run), "--json"]).output)
    result = runner.invoke(app, ["analyze", str(run), "--json", "--no-explain"])
    assert result.exit_code == 0, result.output
    bare = orjson.loads(result.output)
    assert full["stall_causes"]["kv-preemption"]["stalls"] == 1
    assert bare["stall_causes"] is None
    assert bare["fleet"] == full["fleet"]
    assert [f["code"] for f in bare["findings"]] == [
        f["code"] for f in full["findings"] if f["code"] != "stall-cause"
    ]
