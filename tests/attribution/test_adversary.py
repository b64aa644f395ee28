"""`explain` (and the commands that share its options) against hostile options and files:
a clear error naming the option or field, never a traceback, and nothing recorded touched."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import InputError, Where
from steadystream.cli import _register, app
from steadystream.engine_metrics import SCHEMA
from steadystream.files import read_timelines, write_jsonl
from tests.support.attribution import GAP, T0, cadence, stream

_register()
runner = CliRunner()


def flat(output: str) -> str:
    """The output without rich's box and line breaks (it wraps long messages)."""
    return "".join(output.replace("│", "").split())


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (command, option, value)
        for command in ("explain", "analyze", "gate", "whatif")
        for option, value in (("--stall-threshold", "0"), ("--stall-threshold", "0.1ns"))
    ]
    + [(command, "--ttft-target", "0") for command in ("analyze", "gate", "whatif")],
)
def test_a_zero_threshold_is_refused_naming_the_option(
    run: Path, command: str, option: str, value: str
) -> None:
    files = [str(run), str(run)] if command == "gate" else [str(run)]
    result = runner.invoke(app, [command, *files, option, value])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # old code: a ValueError traceback
    assert flat(f"Invalid value for {option}: '{value}': must be above zero") in flat(result.output)


@pytest.mark.parametrize("value", ["-5ms", "1e400s", "abc"])
def test_unreadable_thresholds_are_refused_naming_the_option(run: Path, value: str) -> None:
    result = runner.invoke(app, ["explain", str(run), "--stall-threshold", value])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert "--stall-threshold" in result.output


def scrapes(path: Path, values: list[dict[str, float]]) -> Path:
    lines = [{"schema": SCHEMA, "t": T0 + i * 0.1, "values": v} for i, v in enumerate(values)]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_a_counter_below_zero_is_refused_naming_the_field(run: Path, tmp_path: Path) -> None:
    before = run.read_bytes()
    sidecar = scrapes(
        tmp_path / "bad.jsonl",
        [{"vllm:num_preemptions_total": 0.0}, {"vllm:num_preemptions_total": -5.0}],
    )
    result = runner.invoke(app, ["explain", str(run), "--engine-metrics", str(sidecar)])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert flat("bad.jsonl: line 2: field 'values.vllm:num_preemptions_total' is a counter") in (
        flat(result.output)
    )
    assert run.read_bytes() == before  # the run is read, never rewritten


def test_a_gauge_below_zero_is_not_a_counter(run: Path, tmp_path: Path) -> None:
    sidecar = scrapes(tmp_path / "gauge.jsonl", [{"lab:some_gauge": -1.0}] * 20)
    result = runner.invoke(app, ["explain", str(run), "--engine-metrics", str(sidecar)])
    assert result.exit_code == 0, result.output


def test_a_counter_that_went_backwards_is_read_as_a_reset(run: Path, tmp_path: Path) -> None:
    counts = [{"vllm:num_preemptions_total": float(100 - i)} for i in range(20)]
    sidecar = scrapes(tmp_path / "reset.jsonl", counts)
    result = runner.invoke(app, ["explain", str(run), "--engine-metrics", str(sidecar), "--json"])
    assert result.exit_code == 0, result.output
    (stall,) = orjson.loads(result.output)["stalls"]
    assert stall["cause"] == "kv-preemption"  # a reset counts from zero: it still grew


def test_a_truth_file_of_another_run_scores_nothing_and_says_so(run: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-truth.jsonl"
    write_jsonl(other, [stream(cadence(0, 5), stream_id="zzz", where=Where.LAB)])
    result = runner.invoke(app, ["explain", str(run), "--truth", str(other), "--json"])
    assert result.exit_code == 0, result.output
    truth = orjson.loads(result.output)["truth"]
    assert truth["share_right"] is None
    assert truth["scored_s"] == 0
    assert len(read_timelines(run).timelines) == 2


@pytest.mark.parametrize("start_ms", [1e305, -1e305])
def test_a_wall_clock_outside_the_calendar_is_refused_by_name(
    tmp_path: Path, start_ms: float
) -> None:
    far = stream(GAP, stream_id="a", start_ms=start_ms)
    with pytest.raises(InputError, match="started_at must be a number of seconds within"):
        write_jsonl(tmp_path / "written.jsonl", [far])
    path = tmp_path / "far.jsonl"
    near = tmp_path / "near.jsonl"
    write_jsonl(near, [stream(GAP, stream_id="a", start_ms=0.0)])
    line = orjson.loads(near.read_bytes().splitlines()[0])
    path.write_bytes(orjson.dumps({**line, "started_at": start_ms / 1e3}) + b"\n")
    for command in ("explain", "analyze"):
        result = runner.invoke(app, [command, str(path), "--json"])
        assert result.exit_code == 2, result.output  # old code: OverflowError traceback
        assert "started_at" in result.output


@pytest.mark.parametrize("start_ms", [9e12])
def test_a_wall_clock_past_64_bits_of_ns_is_no_wall_clock(tmp_path: Path, start_ms: float) -> None:
    path = tmp_path / "far.jsonl"
    write_jsonl(path, [stream(GAP, stream_id="a", start_ms=start_ms)])
    for command in ("explain", "analyze"):
        result = runner.invoke(app, [command, str(path), "--json"])
        assert result.exit_code == 0, result.output  # old code: OverflowError traceback
    (stall,) = orjson.loads(runner.invoke(app, ["explain", str(path), "--json"]).output)["stalls"]
    assert stall["duration_s"] == pytest.approx(0.6)
