"""`steadystream analyze` end to end on files, through typer's runner."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from tests.support.timelines import paused_stream, reasoning_timeline, steady_stream

_register()
runner = CliRunner()


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    a, b = steady_stream(), paused_stream()
    a.labels["tenant"], b.labels["tenant"] = "acme", "globex"
    write_jsonl(path, [a, b])
    return path


def test_table_leads_with_the_worst_gap(run_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(run_file)])
    assert result.exit_code == 0, result.output
    assert result.output.index("worst gap") < result.output.index("per-stream p99")
    assert "paused" in result.output
    assert "p99-hides-freezes" in result.output


def test_json_output(run_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(run_file), "--json", "--by", "tenant"])
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.output)
    assert data["fleet"]["streams"] == 2
    assert data["fleet"]["goodput"] == 0.5
    assert data["fleet"]["p99_of_worst_gap_s"] == pytest.approx(1.9802)
    assert set(data["groups"]) == {"acme", "globex"}
    assert data["worst_streams"][0]["stream_id"] == "paused"


def test_ttfr_is_shown_apart_only_where_a_stream_reasoned(run_file: Path, tmp_path: Path) -> None:
    plain = runner.invoke(app, ["analyze", str(run_file)])
    assert plain.exit_code == 0, plain.output
    assert "TTFR" not in plain.output
    assert "reasoned" not in plain.output
    plain_json = orjson.loads(runner.invoke(app, ["analyze", str(run_file), "--json"]).output)
    assert plain_json["fleet"]["reasoning_streams"] == 0
    assert plain_json["fleet"]["ttfr_p50_s"] is None

    thinking = tmp_path / "thinking.jsonl"
    reasoned = reasoning_timeline([300, 320, 340], [2000, 2020, 2040], stream_id="thinker")
    write_jsonl(thinking, [reasoned, steady_stream()])
    table = runner.invoke(app, ["analyze", str(thinking)])
    assert table.exit_code == 0, table.output
    assert "TTFR p50" in table.output
    assert "streams that reasoned" in table.output
    data = orjson.loads(runner.invoke(app, ["analyze", str(thinking), "--json"]).output)
    fleet = data["fleet"]
    assert fleet["reasoning_streams"] == 1
    assert fleet["ttfr_p50_s"] == fleet["ttfr_p99_s"] == pytest.approx(0.300)
    assert fleet["ttft_p50_s"] == pytest.approx((0.200 + 2.000) / 2)  # the answers' first tokens
    (worst,) = [s for s in data["worst_streams"] if s["stream_id"] == "thinker"]
    assert (worst["ttft_s"], worst["ttfr_s"]) == (pytest.approx(2.0), pytest.approx(0.3))


def test_stall_threshold_option_changes_the_verdict(run_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(run_file), "--json", "--stall-threshold", "3s"])
    assert orjson.loads(result.output)["fleet"]["goodput"] == 1.0


def test_bad_duration_names_the_option(run_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(run_file), "--stall-threshold", "soon"])
    assert result.exit_code == 2
    assert "--stall-threshold" in result.output


def test_malformed_line_names_file_line_and_field(run_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = run_file.read_bytes().splitlines()
    record = orjson.loads(lines[1])
    record["times"] = "soon"
    bad.write_bytes(lines[0] + b"\n" + orjson.dumps(record) + b"\n")
    result = runner.invoke(app, ["analyze", str(bad)])
    assert result.exit_code == 2
    assert "bad.jsonl:2" in result.output
    assert "times" in result.output


def test_cut_off_file_loads_complete_streams_and_says_so(run_file: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.jsonl"
    data = run_file.read_bytes()
    cut.write_bytes(data[: len(data) - 40])
    result = runner.invoke(app, ["analyze", str(cut), "--json"])
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.output)
    assert payload["fleet"]["streams"] == 1
    assert "line 2" in payload["notes"][0]


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2
    assert "nope.jsonl" in result.output


def test_experience_model_options_reach_the_metrics(run_file: Path) -> None:
    # The reader and the deadlines of tests/test_metrics.py's KEEPING_UP, as flags.
    keeping_up = [
        "--qoe-expected-ttft",
        "200ms",
        "--qoe-pace",
        "20ms",
        "--fluidity-first-deadline",
        "200ms",
        "--fluidity-deadline",
        "20ms",
    ]
    args = ["analyze", str(run_file), "--json", *keeping_up]
    documented = orjson.loads(runner.invoke(app, args).output)
    code = orjson.loads(runner.invoke(app, [*args, "--fluidity-form", "code"]).output)
    discrete = orjson.loads(runner.invoke(app, [*args, "--qoe-form", "discrete"]).output)
    assert documented["fleet"]["qoe_mean"] == pytest.approx((1 + 1 - 99 / 598) / 2)
    assert documented["fleet"]["fluidity_mean"] == pytest.approx((1 + 199 / 200) / 2)
    assert code["fleet"]["fluidity_mean"] == pytest.approx((1 + 199 / 249) / 2)
    assert discrete["fleet"]["qoe_mean"] != documented["fleet"]["qoe_mean"]
    assert documented["config"]["qoe_pace_s_per_token"] == pytest.approx(0.02)
    assert code["config"]["fluidity_form"] == "code"
    assert code["config"]["fluidity_deadline_s"] == pytest.approx(0.02)


def test_the_table_says_which_experience_models_were_used(run_file: Path) -> None:
    result = runner.invoke(app, ["analyze", str(run_file), "--fluidity-form", "code"])
    assert result.exit_code == 0, result.output
    assert "read at 100.0ms a token (exact form)" in result.output
    assert "(code form)" in result.output


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--fluidity-form", "paper", "'documented' or 'code'"),
        ("--qoe-form", "smooth", "'exact' or 'discrete'"),
        ("--qoe-pace", "0ms", "above zero"),
        ("--fluidity-deadline", "soon", "cannot read"),
    ],
)
def test_bad_experience_model_options_name_the_option(
    run_file: Path, option: str, value: str, says: str
) -> None:
    result = runner.invoke(app, ["analyze", str(run_file), option, value])
    assert result.exit_code == 2
    assert option in result.output
    assert says in result.output


HOSTILE = ["[/]x", "[link=https://example.invalid]y[/link]", "\x1b]0;owned\x07t\x1b[2Jz\rw"]


@pytest.mark.parametrize("command", ["analyze", "explain"])
def test_ids_and_labels_from_a_file_are_shown_as_written_never_as_markup(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "run[1].jsonl"
    streams = []
    for i, text in enumerate(HOSTILE):
        stream = paused_stream().replace(stream_id=text)
        stream.labels["model"] = text if i else "[bold]m"
        streams.append(stream)
    write_jsonl(path, streams)
    args = [command, str(path), "--stalls", "5"] if command == "explain" else [command, str(path)]
    result = runner.invoke(app, [*args, *(["--by", "model"] if command == "analyze" else [])])
    assert result.exit_code == 0, result.output
    assert "[/]x" in result.output
    assert "[link=https://example.invalid]y[/link]" in result.output
    if command == "analyze":
        assert "model=[bold]m" in result.output
    assert "\x1b" not in result.output
    assert "\r" not in result.output
    assert "\ufffd]0;owned\ufffdt" in result.output
