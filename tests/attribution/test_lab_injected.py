"""The lab's X-Lab-Fault pauses are counted in its /metrics as played, as the replay counts its
injections, so that explain names them injected-fault (not an engine pause of one stream)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from steadystream import LabServer
from steadystream.attribution import Cause
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.lab import LabMetrics
from steadystream.lab.truth import RequestTruth
from steadystream.lab.wire import SseFormat
from tests.support.lab import scenario
from tests.support.lab_wire import respond

_register()
runner = CliRunner()

QUICK = scenario(
    "steady",
    scheduler={"step_base_ms": 10.0},
    output={"min_tokens": 30, "max_tokens": 30},
)


def _wire(_: object) -> SseFormat:
    return SseFormat(
        chat=True, completion_id="chatcmpl-w-1", model="lab", created=0, include_usage=True
    )


def injected_played(metrics: LabMetrics) -> float:
    families = text_string_to_metric_families(metrics.exposition().decode())
    (family,) = [f for f in families if f.name == "lab:injected_faults"]
    return sum(s.value for s in family.samples if s.name == "lab:injected_faults_total")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("faults", "played"),
    [
        ("stall-after=10:2s", 1),
        ("slow-first-token=1s", 1),
        ("stall-after=5:500ms,slow-first-token=300ms", 2),
        ("silent-finish=1s", 0),  # holds no text back: no stall to name
        ("", 0),
    ],
)
async def test_the_labs_injected_pauses_are_counted_as_they_are_played(
    faults: str, played: int
) -> None:
    metrics = LabMetrics(CollectorRegistry())
    written = await respond(QUICK, _wire, faults, max_tokens=30, metrics=metrics)
    assert injected_played(metrics) == played
    # the truth charges the same content events
    charged = [
        extra
        for extra, kind in zip(written.truth.extra_ns, written.truth.kinds, strict=True)
        if extra and extra.get(Cause.INJECTED_FAULT.value, 0) > 0 and kind == 1
    ]
    assert len(charged) == played


@pytest.mark.integration
def test_explain_names_an_x_lab_fault_stall_injected(tmp_path: Path) -> None:
    played: list[RequestTruth] = []
    out = tmp_path / "run.jsonl"
    with LabServer("steady", on_done=played.append) as lab:
        args = ["bench", lab.base_url, "-m", "lab", "-o", str(out), "--no-live"]
        args += ["--requests", "3", "--concurrency", "1", "--warmup", "0"]
        args += ["-H", "X-Lab-Fault: stall-after=20:1s", "--engine-metrics", "auto"]
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    truth = tmp_path / "truth.jsonl"
    write_jsonl(truth, [record.to_timeline() for record in played])
    explained = runner.invoke(app, ["explain", str(out), "--truth", str(truth), "--json"])
    assert explained.exit_code == 0, explained.output
    payload = orjson.loads(explained.output)
    # Each stream's longest stall is the injected 1 s pause. (Not every stall over a fixed
    # length: on a busy machine the lab can write the token before the pause late, and the
    # pause the client sees is then shorter than the one the lab held.)
    longest: dict[str, dict[str, Any]] = {}
    for stall in payload["stalls"]:
        kept = longest.get(stall["stream_id"])
        if kept is None or stall["duration_s"] > kept["duration_s"]:
            longest[stall["stream_id"]] = stall
    injected = list(longest.values())
    assert len(injected) == 3, payload["stalls"]
    assert all(s["duration_s"] > 0.5 for s in injected), injected
    assert {s["cause"] for s in injected} == {"injected-fault"}
    assert payload["truth"]["matrix_s"]["injected-fault"] == {
        "injected-fault": pytest.approx(sum(s["duration_s"] for s in injected))
    }
