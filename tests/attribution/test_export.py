"""explain's exports: stall time by cause as a Prometheus text file and as an OTLP counter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from steadystream import Where
from steadystream.attribution import ATTRIBUTABLE, AttributedStall, Explanation, Share, explain
from steadystream.attribution.export import CAUSE_ATTRIBUTE, STALL_TIME_METRIC, stall_totals
from steadystream.cli import _register, app
from steadystream.cli._explain_export import export_otel, record_stall_time
from steadystream.files import read_timelines
from tests.support.otel import captured

_register()
runner = CliRunner()

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample-run.jsonl"
MS = 1_000_000


def a_stall(cause: str, ms: int, shares: tuple[Share, ...] = ()) -> AttributedStall:
    return AttributedStall(
        stream=0,
        stream_id="s",
        where=Where.CLIENT,
        event_index=5,
        text_index=4,
        start_ns=100 * MS,
        end_ns=(100 + ms) * MS,
        cause=cause,
        confidence=0.8,
        evidence="",
        first_token=False,
        started_at=None,
        shares=shares,
    )


def explanation_of(*stalls: AttributedStall) -> Explanation:
    return Explanation(list(stalls), [], [], 1, [], 400 * MS)


def samples(text: str) -> dict[str, dict[str, float]]:
    """Metric family -> cause -> value, as Prometheus's own text parser reads the file."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "counter"
        for sample in family.samples:
            if sample.name.endswith("_total"):
                found.setdefault(sample.name, {})[sample.labels["cause"]] = sample.value
    return found


def test_the_prometheus_file_has_the_sample_runs_stall_time_by_cause(tmp_path: Path) -> None:
    out = tmp_path / "explain.prom"
    result = runner.invoke(app, ["explain", str(SAMPLE), "--prometheus", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["explain.prom"]  # the temporary renamed
    found = samples(out.read_text())
    seconds = found["steadystream_stall_seconds_total"]
    stalls = found["steadystream_stalls_total"]
    # the label set is the catalogue's, every label present; nothing from the input
    assert list(seconds) == list(ATTRIBUTABLE)
    assert list(stalls) == list(ATTRIBUTABLE)
    done = explain(read_timelines(SAMPLE).timelines)
    assert sum(seconds.values()) == pytest.approx(done.stall_time_s)
    assert seconds["kv-preemption"] == pytest.approx(12.0, abs=0.01)
    assert seconds["head-burst"] == pytest.approx(2.52)
    assert stalls == {
        cause: {"kv-preemption": 6, "head-burst": 6}.get(cause, 0) for cause in stalls
    }


def test_a_split_stall_adds_its_shares_and_counts_once_by_its_largest() -> None:
    split = (Share("prefill-interference", 0.75, 0.9), Share("spec-decode-rejection", 0.25, 0.8))
    totals = {
        t.cause: t
        for t in stall_totals(
            explanation_of(
                a_stall("prefill-interference", 800, split), a_stall("kv-preemption", 500)
            )
        )
    }
    assert totals["prefill-interference"].seconds == pytest.approx(0.6)
    assert totals["spec-decode-rejection"].seconds == pytest.approx(0.2)
    assert totals["kv-preemption"].seconds == pytest.approx(0.5)
    assert totals["prefill-interference"].stalls == 1
    assert totals["spec-decode-rejection"].stalls == 0
    assert totals["kv-preemption"].stalls == 1


def test_a_cause_outside_the_catalogue_is_refused_not_made_a_label() -> None:
    with pytest.raises(ValueError, match="'my-cause' is not one of queueing"):
        stall_totals(explanation_of(a_stall("my-cause", 500)))


def test_the_prometheus_file_needs_a_folder_that_exists(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "explain.prom"
    result = runner.invoke(app, ["explain", str(SAMPLE), "--prometheus", str(out)])
    assert result.exit_code == 2
    assert "--prometheus: no folder" in result.output
    assert not out.parent.exists()


def test_stall_time_goes_out_as_an_otel_counter_by_cause() -> None:
    done = explain(read_timelines(SAMPLE).timelines)
    capture = captured()
    try:
        record_stall_time(capture.exporter, stall_totals(done))
        metric = capture.metrics()[STALL_TIME_METRIC]
    finally:
        capture.exporter.shutdown()
    assert metric.unit == "s"
    assert metric.data.is_monotonic
    points = {p.attributes[CAUSE_ATTRIBUTE]: p.value for p in metric.data.data_points}
    assert set(points) == set(ATTRIBUTABLE)
    assert points["kv-preemption"] == pytest.approx(12.0, abs=0.01)
    assert points["head-burst"] == pytest.approx(2.52)
    assert sum(points.values()) == pytest.approx(done.stall_time_s)


def test_otel_is_off_without_the_environment_and_not_imported() -> None:
    assert export_otel({}, []) is False
    assert (
        export_otel(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}, []
        )
        is False
    )
    code = (
        "import sys\n"
        "from steadystream.cli import _register, app\n"
        "_register()\n"
        f"app(['explain', {str(SAMPLE)!r}, '--json'], standalone_mode=False)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "print('loaded:', loaded, file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stderr
