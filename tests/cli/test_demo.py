"""`steadystream demo` end to end, short: lab, gateway, two benches, a report, nothing left."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import read_timelines

_register()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.integration
def test_demo_runs_end_to_end_and_leaves_no_process(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    workdir = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["demo", "--duration", "4s", "-o", str(report), "--workdir", str(workdir)],
    )
    assert result.exit_code == 0, result.output
    pids = [int(p) for p in re.findall(r"(?:lab|gateway) (\d+)", result.output)]
    assert len(pids) == 3  # the lab twice (a fresh one per run) and the gateway
    assert not any(_alive(pid) for pid in pids)

    direct = read_timelines(workdir / "direct.jsonl").timelines
    paced = read_timelines(workdir / "paced.jsonl").timelines
    assert direct
    assert paced
    assert all(t.where.value == "client" for t in direct + paced)
    html = report.read_text()
    for chart in ("itl-band", "gap-cdfs", "stall-map", "worst-streams", "whatif"):
        assert f'id="{chart}"' in html
    assert "What the user felt" in result.output
    assert "p99 of worst gap" in result.output


def test_demo_rejects_a_bad_pacer_before_starting_anything(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--pacer", "leaky:speed=9", "--workdir", str(tmp_path / "run")]
    )
    assert result.exit_code == 2
    assert "speed" in result.output
    assert not (tmp_path / "run").exists()
