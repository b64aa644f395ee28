"""`bench` against the wrong address: one error that says what to do, and no table before it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.files import read_jsonl
from steadystream.lab import LabServer, scenario_from_mapping
from tests.support.bench import closed_port

pytestmark = pytest.mark.integration

_register()
runner = CliRunner()


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer("steady") as server:
        yield server


def bench(url: str, out: Path, *extra: str, requests: int = 2) -> list[str]:
    count = ("--requests", str(requests))
    return ["bench", url, "-m", "lab", "-o", str(out), "--no-live", *count, *extra]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_dead_port_is_one_error_before_any_table(tmp_path: Path) -> None:
    port = closed_port()
    result = runner.invoke(app, bench(f"http://127.0.0.1:{port}/v1", tmp_path / "r.jsonl"))
    assert result.exit_code == 3, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: cannot connect to http://127.0.0.1:{port}: Connection refused;"
        " is a server running at that address?"
    ]
    assert "p99 of worst gap" not in result.output  # no table of dashes
    assert "counted every chunk" not in result.output  # nor notes on streams never sent
    assert not (tmp_path / "r.jsonl").exists()


def test_a_base_url_without_v1_says_what_was_meant(lab: LabServer, tmp_path: Path) -> None:
    root = lab.base_url.removesuffix("/v1")
    result = runner.invoke(app, bench(root, tmp_path / "r.jsonl", "--max-tokens", "4"))
    assert result.exit_code == 3, result.output
    text = flat(result.output)
    assert "error: no stream succeeded (2 of 2 failed)" in text
    assert f"HTTP 404 Not Found: Not Found; did you mean {lab.base_url}?" in text
    assert "bench adds /chat/completions" in text
    assert "p99 of worst gap" not in text  # the one line that matters is not buried
    assert "counted every chunk" not in text
    assert len(read_jsonl(tmp_path / "r.jsonl").timelines) == 2  # the failures are kept


def test_the_whole_endpoint_url_given_says_the_base(lab: LabServer, tmp_path: Path) -> None:
    whole = f"{lab.base_url}/chat/completions"
    result = runner.invoke(app, bench(whole, tmp_path / "r.jsonl", "--max-tokens", "4"))
    assert result.exit_code == 3, result.output
    assert f"did you mean {lab.base_url}?" in flat(result.output)


def test_a_run_into_a_pipe_shows_whole_stream_ids(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = runner.invoke(
        app, bench(lab.base_url, out, "--max-tokens", "4"), env={"COLUMNS": None}
    )
    assert result.exit_code == 0, result.output
    for timeline in read_jsonl(out).timelines:
        assert timeline.stream_id in result.output
    assert "…" not in result.output


def test_token_notes_count_only_streams_that_delivered_tokens(tmp_path: Path) -> None:
    # Half the lab's answers are an error before any token: those streams have no count.
    failing = scenario_from_mapping(
        {"preset": "steady", "faults": {"share": 0.5, "error_after": 0}}
    )
    out = tmp_path / "r.jsonl"
    with LabServer(failing, seed=3) as lab:
        extra = ("--max-tokens", "4", "--warmup", "0", "--json")
        result = runner.invoke(app, bench(lab.base_url, out, *extra, requests=8))
    assert result.exit_code == 0, result.output
    timelines = read_jsonl(out).timelines
    delivered = sum(1 for t in timelines if t.total_tokens)
    assert 0 < delivered < len(timelines) == 8
    notes = [note for note in orjson.loads(result.stdout)["notes"] if "token counts" in note]
    assert notes == [
        f"token counts of {delivered} of {delivered} streams: from the final usage total,"
        " which matched the chunk count: one token per chunk"
    ]
