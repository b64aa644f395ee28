"""`steadystream lab`: the preset list, and serving with --record from a YAML scenario."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Where
from steadystream._processes import free_port as _free_port
from steadystream.cli import _register, app
from steadystream.files import read_jsonl
from steadystream.lab import PRESETS
from tests.support.lab import wait_serving

_register()
runner = CliRunner()


def test_list_prints_one_line_per_preset() -> None:
    result = runner.invoke(app, ["lab", "--list"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(PRESETS)


def test_a_port_out_of_range_is_refused_before_serving() -> None:
    result = runner.invoke(app, ["lab", "--port", "99999"])
    assert result.exit_code == 2
    assert "--port" in result.output
    assert "65535" in result.output


def test_a_bad_scenario_exits_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("scheduler:\n  step_base_ms: fast\n", encoding="utf-8")
    result = runner.invoke(app, ["lab", "--scenario", str(path)])
    assert result.exit_code == 2
    assert "scheduler.step_base_ms" in result.output


@pytest.mark.integration
def test_serve_records_ground_truth_timelines(tmp_path: Path) -> None:
    scenario = tmp_path / "quick.yaml"
    scenario.write_text("preset: steady\nscheduler:\n  step_base_ms: 5\n", encoding="utf-8")
    record = tmp_path / "truth.jsonl"
    port = _free_port()
    command = [
        sys.executable, "-c", "from steadystream.cli import main; main()",
        "lab", "--scenario", str(scenario), "--port", str(port), "--seed", "5",
        "--record", str(record),
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_serving(base, server)
        body = {"model": "lab", "prompt": "x", "max_tokens": 5, "stream": True}
        request = urllib.request.Request(
            f"{base}/v1/completions",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json", "X-Request-Id": "rec-1"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.read().endswith(b"data: [DONE]\n\n")
    finally:
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=20)[0].decode()
    assert "scenario 'quick', seed 5" in output
    (timeline,) = read_jsonl(record).timelines
    assert timeline.stream_id == "rec-1"
    assert timeline.where is Where.LAB
    assert timeline.total_tokens == 5
    assert "cause" in timeline.annotations
    assert timeline.meta["kv_freed_ns"] is not None
