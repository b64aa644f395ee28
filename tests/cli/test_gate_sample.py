"""`gate` says when its runs are too small to judge: sample sizes and bootstrap intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
from typer.testing import CliRunner

from steadystream import Timeline
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from tests.support.timelines import make_timeline

_register()
runner = CliRunner()


def jittery_run(
    streams: int, seed: int, *, pauses: float = 0.3, freeze_ms: float = 0.0
) -> list[Timeline]:
    """Streams from one server: steady 20 ms gaps, and in a share ``pauses`` of them one
    longer pause (0.1-1.5 s); ``freeze_ms`` adds a freeze of that length to every stream."""
    rng = np.random.default_rng(seed)
    run = []
    for k in range(streams):
        gaps = rng.uniform(18, 22, 60)
        if rng.random() < pauses:
            gaps[rng.integers(5, 55)] = rng.uniform(100, 1500)
        gaps[30] += freeze_ms
        times = 50 + rng.uniform(0, 20) + np.cumsum(gaps)
        run.append(make_timeline(times.tolist(), stream_id=f"s{seed}-{k}"))
    return run


def gate(tmp_path: Path, baseline: list[Timeline], current: list[Timeline], *extra: str) -> str:
    paths = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    write_jsonl(paths[0], baseline)
    write_jsonl(paths[1], current)
    result = runner.invoke(app, ["gate", *map(str, paths), *extra])
    return f"{result.exit_code}\n{result.output}"


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_twelve_streams_are_too_few_to_judge_and_do_not_pass(tmp_path: Path) -> None:
    output = gate(tmp_path, jittery_run(12, seed=1), jittery_run(12, seed=2))
    code, text = output.split("\n", 1)
    assert code == "4", text  # not 0: a release gate does not pass on too little evidence
    text = flat(text)
    assert "cand.jsonl (12 streams) against" in text
    assert "base.jsonl (12 streams); 95% bootstrap intervals in brackets" in text
    assert "too few streams to judge p99_of_worst_gap (12 and 12 streams):" in text
    assert "(95% bootstrap interval), across the +10% limit" in text
    assert "gate undecided: too few streams to judge" in text
    assert "unsure" in text
    assert "gate passed" not in text


def test_enough_streams_of_the_same_steady_server_pass(tmp_path: Path) -> None:
    steady = jittery_run(200, seed=1, pauses=0), jittery_run(200, seed=2, pauses=0)
    code, text = gate(tmp_path, *steady).split("\n", 1)
    assert code == "0", text
    assert "(200 streams)" in text
    assert "gate passed" in text


def test_a_jittery_server_needs_more_streams_than_a_steady_one(tmp_path: Path) -> None:
    # The same jittery server twice: 400 streams cannot bound its worst gaps within 10 %.
    code, text = gate(tmp_path, jittery_run(400, seed=1), jittery_run(400, seed=2)).split("\n", 1)
    assert code == "4", text
    assert "too few streams to judge p99_of_worst_gap (400 and 400 streams)" in flat(text)
    assert "FAIL" not in text


def test_a_clear_regression_fails_even_on_few_streams(tmp_path: Path) -> None:
    output = gate(tmp_path, jittery_run(12, seed=1), jittery_run(12, seed=2, freeze_ms=3000))
    code, text = output.split("\n", 1)
    assert code == "1", text
    (failed,) = [line for line in text.splitlines() if line.startswith("gate failed:")]
    assert "p99_of_worst_gap" in failed


def test_json_gives_sizes_intervals_and_what_was_undecided(tmp_path: Path) -> None:
    output = gate(tmp_path, jittery_run(12, seed=1), jittery_run(12, seed=2), "--json")
    code, text = output.split("\n", 1)
    assert code == "4"
    payload = orjson.loads(text)
    assert payload["passed"] is False
    assert payload["streams"] == {"baseline": 12, "current": 12}
    assert payload["confidence"] == 0.95
    assert "p99_of_worst_gap_s" in payload["undecided"]
    row = next(r for r in payload["rows"] if r["metric"] == "p99_of_worst_gap_s")
    low, high = row["change_interval"]
    assert low < 10 < high  # the interval straddles the +10% limit: that is why
    assert row["baseline_interval"][0] <= row["baseline"] <= row["baseline_interval"][1]
