"""The release gate: rules, directions, verdicts, and the `gate` command's exit codes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import SpecError
from steadystream.bench.gate import GateRule, compare, gateable_metrics, parse_rules
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.metrics import fleet_metrics
from tests.support.bench import frozen_run, steady_run

_register()
cli = CliRunner()


# -- rules ---------------------------------------------------------------------------------------


def test_rules_resolve_names_and_directions() -> None:
    rule = GateRule.parse("p99_of_p99=10%")
    assert (rule.metric, rule.worse, rule.limit, rule.unit) == ("p99_of_p99_s", 1, 10.0, "%")
    down = GateRule.parse("goodput=-2pt")
    assert (down.metric, down.worse, down.limit, down.unit) == ("goodput", -1, 0.02, "pt")
    assert GateRule.parse("goodput=2pt").worse == -1  # the sign is optional when known
    timed = GateRule.parse("ttft_p95=50ms")
    assert timed.unit == "s"
    assert timed.limit == pytest.approx(0.05)
    assert GateRule.parse("tokens_per_chunk_mean=+5%").worse == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("goodput=+2pt", r"lower is worse .* goodput=-2pt"),
        ("unstable_share=-1pt", r"higher is worse .* unstable_share=\+1pt"),
        ("tokens_per_chunk_mean=5%", "say which way is worse"),
        ("p99_of_p99=2pt", "for shares"),
        ("goodput=50ms", "not a time"),
        ("p99_of_p99=lots", "cannot read limit"),
        ("p99_of_p99", "expected METRIC=LIMIT"),
    ],
)
def test_bad_rules_say_how_to_write_them(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        GateRule.parse(text)


def test_unknown_metric_lists_the_known_ones() -> None:
    with pytest.raises(SpecError) as info:
        GateRule.parse("p99_gap=10%")
    message = str(info.value)
    assert "unknown metric 'p99_gap'" in message
    for name in ("p99_of_p99", "p99_of_worst_gap", "goodput", "ttft_p95", "unstable_share"):
        assert name in message
    assert "stall_threshold" not in message  # a setting, not a result
    assert "stall_threshold_s" not in gateable_metrics()


def test_given_rules_replace_defaults_of_the_same_metric() -> None:
    rules = parse_rules(["ttft_p95=50%,stall_count=+3", "p99_of_p99=5%"])
    by_metric = {r.metric: r for r in rules}
    assert len(rules) == 6
    assert by_metric["ttft_p95_s"].limit == 50
    assert by_metric["p99_of_p99_s"].limit == 5
    assert by_metric["goodput"].limit == pytest.approx(0.02)  # a default kept
    only = parse_rules(["stall_count=+3"], defaults=False)
    assert [r.metric for r in only] == ["stall_count"]


# -- verdicts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "baseline", "current", "verdict"),
    [
        ("p99_of_p99=10%", 0.100, 0.110, "pass"),  # exactly at the limit
        ("p99_of_p99=10%", 0.100, 0.1101, "FAIL"),
        ("p99_of_p99=10%", 0.100, 0.020, "pass"),  # better never fails
        ("p99_of_p99=10%", 0.0, 0.0, "pass"),
        ("p99_of_p99=10%", 0.0, 0.001, "FAIL"),
        ("goodput=-2pt", 0.99, 0.97, "pass"),
        ("goodput=-2pt", 0.99, 0.969, "FAIL"),
        ("goodput=-2pt", 0.50, 1.00, "pass"),
        ("unstable_share=+1pt", 0.0, 0.02, "FAIL"),
        ("ttft_p95=50ms", 0.300, 0.349, "pass"),
        ("ttft_p95=50ms", 0.300, 0.351, "FAIL"),
        ("p99_of_p99=10%", None, 0.1, "n/a"),
        ("p99_of_p99=10%", 0.1, None, "n/a"),
    ],
)
def test_judge(rule: str, baseline: float | None, current: float | None, verdict: str) -> None:
    assert GateRule.parse(rule).judge(baseline, current) == verdict


def test_compare_fails_a_frozen_run_and_passes_a_rerun() -> None:
    rules = parse_rules([])
    base = fleet_metrics(steady_run())
    rerun = compare(base, fleet_metrics(steady_run(gap_ms=20.5)), rules)
    assert rerun.passed, rerun.rows
    frozen = compare(base, fleet_metrics(frozen_run()), rules)
    assert not frozen.passed
    failed = {row.metric for row in frozen.failures}
    assert {"p99_of_worst_gap_s", "goodput"} <= failed
    row = next(r for r in frozen.rows if r.metric == "goodput")
    assert (row.baseline, row.current, row.change) == (1.0, 0.0, "-100.00pt")


# -- the command ---------------------------------------------------------------------------------


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / f"{name}.jsonl" for name in ("base", "rerun", "frozen", "empty")}
    write_jsonl(paths["base"], steady_run())
    write_jsonl(paths["rerun"], steady_run(gap_ms=20.5))
    write_jsonl(paths["frozen"], frozen_run())
    paths["empty"].write_text("")
    return paths


def test_gate_passes_a_rerun(runs: dict[str, Path]) -> None:
    result = cli.invoke(app, ["gate", str(runs["base"]), str(runs["rerun"])])
    assert result.exit_code == 0, result.output
    assert "gate passed" in result.output
    for column in ("metric", "baseline", "current", "change", "limit", "verdict"):
        assert column in result.output


def test_gate_fails_a_regression_with_exit_1(runs: dict[str, Path]) -> None:
    result = cli.invoke(app, ["gate", str(runs["base"]), str(runs["frozen"])])
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output
    assert "gate failed" in result.output
    assert "p99_of_worst_gap" in result.output


def test_gate_json(runs: dict[str, Path]) -> None:
    result = cli.invoke(
        app,
        ["gate", str(runs["base"]), str(runs["frozen"]), "--json", "-r", "goodput=-50pt"],
    )
    assert result.exit_code == 1
    payload = orjson.loads(result.output)
    assert payload["passed"] is False
    goodput = next(r for r in payload["rows"] if r["metric"] == "goodput")
    assert list(goodput) == [
        *("metric", "baseline", "current", "change", "limit", "verdict"),
        *("baseline_interval", "current_interval", "change_interval"),
    ]
    assert goodput["limit"] == "-50pt"
    assert goodput["verdict"] == "FAIL"
    # every frozen stream is alike, as every base stream is: no draw moves goodput
    assert goodput["change_interval"] == [-100.0, -100.0]
    assert payload["streams"] == {"baseline": 10, "current": 10}


def test_a_looser_limit_lets_it_pass(runs: dict[str, Path]) -> None:
    result = cli.invoke(
        app,
        [
            "gate",
            str(runs["base"]),
            str(runs["frozen"]),
            "--no-defaults",
            "-r",
            "p99_of_p99=2000%",
        ],
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("which", "extra", "message"),
    [
        ("missing", [], "cannot read"),
        ("empty", [], "no streams"),
        ("rerun", ["-r", "p99_gap=10%"], "unknown metric"),
    ],
)
def test_unusable_input_exits_2(
    runs: dict[str, Path], tmp_path: Path, which: str, extra: list[str], message: str
) -> None:
    current = runs.get(which, tmp_path / "nowhere.jsonl")
    result = cli.invoke(app, ["gate", str(runs["base"]), str(current), *extra])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
