"""`steadystream bench` end to end against the lab: summary, file, exit codes, Ctrl-C."""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from rich.console import Console
from typer.testing import CliRunner

from steadystream import FakeClock, Outcome
from steadystream.bench.progress import RunProgress
from steadystream.cli import _register, app
from steadystream.cli._bench_view import LiveView
from steadystream.files import read_jsonl, write_jsonl
from steadystream.lab import LabServer
from steadystream.stamped import kernel_stamps_available
from tests.support.bench import closed_port, frozen_run, steady_run

pytestmark = pytest.mark.integration

_register()
cli = CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


def bench(lab_url: str, out: Path, *extra: str) -> list[str]:
    return ["bench", lab_url, "-m", "lab", "-o", str(out), "--no-live", *extra]


def test_a_small_run_records_every_stream(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    args = bench(lab.base_url, out, "--concurrency", "2", "--requests", "4", "--max-tokens", "8")
    result = cli.invoke(
        app,
        [*args, "--api-key-env", "SS_BENCH_TEST_KEY"],
        env={"SS_BENCH_TEST_KEY": "sk-TOPSECRET"},
    )
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    for words in ("p99 of worst gap", "client event-loop lag", "token counts of 4 of 4"):
        assert words in text
    assert "Authorization: Bearer ***" in text
    stamps = "kernel" if kernel_stamps_available() else "user"
    assert f"stamps {stamps}" in text
    timelines = read_jsonl(out).timelines
    assert len(timelines) == 4
    assert all(t.outcome is Outcome.COMPLETE for t in timelines)
    assert {t.meta["stamps"] for t in timelines} == {stamps}
    for timeline in timelines:  # the id sent as X-Request-Id is the lab's record
        truth = lab.truth(timeline.stream_id)
        assert truth is not None
        assert truth.tokens_written == timeline.total_tokens == 8
    assert "TOPSECRET" not in result.output
    assert b"TOPSECRET" not in out.read_bytes()


def test_json_summary(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    args = bench(lab.base_url, out, "--requests", "2", "--max-tokens", "6", "--json")
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = orjson.loads(result.stdout)
    assert payload["fleet"]["streams"] == 2
    assert any(note.startswith("load: closed loop, concurrency 1") for note in payload["notes"])


def test_a_server_not_there_exits_3_with_one_error_before_anything(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = cli.invoke(app, bench(url, tmp_path / "r.jsonl", "--requests", "2", "--warmup", "0"))
    assert result.exit_code == 3, result.output
    text = flat(result.output)
    assert "error: cannot connect to http://127.0.0.1" in text
    assert "p99 of worst gap" not in text  # no table of dashes before the error
    assert not (tmp_path / "r.jsonl").exists()  # nothing was sent, nothing recorded


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cancel", "0.5"], "--cancel FRACTION and --cancel-after"),
        (["--rate", "1", "--trace", "t.txt"], "cannot be combined"),
        (["--api-key-env", "SS_NOT_SET_ANYWHERE"], "SS_NOT_SET_ANYWHERE is empty"),
        (["--output-tokens", "lots"], "--output-tokens"),
        (["--sweep", "rates=1,2", "--rate", "3"], "leave out --rate"),
        (["-r", "nonsense=1%", "--gate", "base.jsonl"], "unknown metric"),
        (
            ["--stamps", "sometimes"],
            "--stamps: got 'sometimes' (accepted: 'auto', 'kernel' or 'user')",
        ),
    ],
)
def test_unusable_options_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], message: str
) -> None:
    (tmp_path / "t.txt").write_text("0\n")
    (tmp_path / "base.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    result = cli.invoke(app, bench("http://127.0.0.1:9/v1", tmp_path / "r.jsonl", *extra))
    assert result.exit_code == 2, result.output
    assert message in flat(result.output)


def test_bad_url_and_output_exit_2(tmp_path: Path) -> None:
    result = cli.invoke(app, bench("localhost:8000/v1", tmp_path / "r.jsonl"))
    assert result.exit_code == 2
    assert "http(s) API base" in flat(result.output)
    result = cli.invoke(app, bench("http://127.0.0.1:9/v1", tmp_path / "r.parquet"))
    assert result.exit_code == 2
    assert "use .jsonl" in flat(result.output)


def test_bench_gate_exit_codes(lab: LabServer, tmp_path: Path) -> None:
    smooth, frozen = tmp_path / "smooth.jsonl", tmp_path / "frozen.jsonl"
    write_jsonl(smooth, steady_run(gap_ms=1.0))  # far smoother than any real server
    write_jsonl(frozen, frozen_run())
    run = ["--requests", "2", "--max-tokens", "8"]
    failed = cli.invoke(
        app, [*bench(lab.base_url, tmp_path / "a.jsonl", *run), "--gate", str(smooth)]
    )
    assert failed.exit_code == 1, failed.output
    assert "gate failed" in failed.output
    loose = ["-r", "unstable_share=+100pt"]  # a stray slow gap must not decide this test
    passed = cli.invoke(
        app, [*bench(lab.base_url, tmp_path / "b.jsonl", *run), "--gate", str(frozen), *loose]
    )
    assert passed.exit_code == 0, passed.output
    assert "gate passed" in passed.output


def test_a_sweep_prints_the_curve_and_the_answer(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    args = bench(lab.base_url, out, "--sweep", "concurrency=1,2", "--requests", "2")
    result = cli.invoke(app, [*args, "--max-tokens", "6", "--cooldown", "0s"])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "Sweep: concurrency: 1, 2" in text
    assert "fluid capacity: 2 concurrent streams" in text
    loads = {t.labels["load"] for t in read_jsonl(out).timelines}
    assert loads == {"concurrency=1", "concurrency=2"}


def test_ctrl_c_keeps_what_finished(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    # A shell starts background jobs with SIGINT ignored and children inherit that (CI may run
    # the suite so); give the child the Ctrl-C a person at a terminal has.
    command = [
        sys.executable,
        "-c",
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from steadystream.cli import main; main()",
    ]
    args = bench(lab.base_url, out, "--concurrency", "2", "--requests", "500", "--max-tokens", "8")
    with subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            deadline = time.monotonic() + 30
            while not (out.exists() and out.read_bytes().count(b"\n") >= 3):
                assert time.monotonic() < deadline
                assert process.poll() is None
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            output, _ = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 130, output
    assert "interrupted: kept" in output
    result = read_jsonl(out)
    assert result.truncated_line is None
    outcomes = [t.outcome for t in result.timelines]
    assert outcomes.count(Outcome.COMPLETE) >= 3
    assert len(outcomes) < 500
    interrupted = [t for t in result.timelines if t.outcome is Outcome.CANCELLED]
    assert all(t.error == "run interrupted mid-stream" for t in interrupted)


@pytest.mark.asyncio
async def test_the_live_view_draws_progress() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=160)
    progress = RunProgress(FakeClock())
    progress.started()
    progress.request_sent()
    view = LiveView(console, enabled=True)
    view.follow(progress, "closed loop, concurrency 1", total=10, duration_s=None)
    await asyncio.sleep(0.05)
    await view.stop()
    drawn = buffer.getvalue()
    assert "0/10 streams" in drawn
    assert "in flight" in drawn
    assert "p99 of worst gap" in drawn


def test_request_ids_can_go_unsent(lab: LabServer, tmp_path: Path) -> None:
    # For servers that refuse ids they did not make (llama-cpp-python: UUIDs only).
    out = tmp_path / "run.jsonl"
    args = bench(lab.base_url, out, "--requests", "2", "--max-tokens", "4", "--warmup", "0")
    result = cli.invoke(app, [*args, "--request-id-header", "none"])
    assert result.exit_code == 0, result.output
    timelines = read_jsonl(out).timelines
    assert [t.outcome for t in timelines] == [Outcome.COMPLETE] * 2
    # The lab saw no id and made its own: bench's ids are not on its records.
    assert all(lab.truth(t.stream_id) is None for t in timelines)
    assert lab.truth("lab-000001") is not None
