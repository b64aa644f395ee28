"""`run_bench`: the whole command as one library call, against the lab on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from steadystream import Outcome, SteadystreamError, UpstreamConnectError
from steadystream.bench import BenchConfig, BenchHooks, BenchRunner, run_bench
from steadystream.files import read_jsonl, write_jsonl
from steadystream.lab import LabServer
from tests.support.bench import closed_port, frozen_run, steady_run

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


class Heard(BenchHooks):
    def __init__(self) -> None:
        self.started: list[tuple[str, int | None]] = []
        self.ended = 0
        self.runners: list[BenchRunner] = []

    def run_started(
        self, runner: BenchRunner, title: str, total: int | None, duration_s: float | None
    ) -> None:
        self.started.append((title, total))
        self.runners.append(runner)

    async def run_ended(self) -> None:
        self.ended += 1


def config(url: str, out: Path, **values: Any) -> BenchConfig:
    return BenchConfig.from_options(
        {"url": url, "model": "lab", "output": str(out), "max_tokens": 6, **values}
    )


async def test_one_run_is_recorded_summarised_and_heard(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    heard = Heard()
    outcome = await run_bench(config(lab.base_url, out, requests=3, concurrency=2), hooks=heard)
    assert heard.started == [("closed loop, concurrency 2", 3)]
    assert heard.ended == 1
    assert outcome.written == 3
    assert not outcome.interrupted
    assert not outcome.nothing_succeeded
    assert outcome.summary is not None
    assert outcome.summary.fleet.streams == 3
    assert any(n.startswith("load: closed loop, concurrency 2") for n in outcome.summary.notes)
    assert outcome.summary.notes[-1] == f"recorded 3 streams to {out}"
    assert outcome.verdict is None
    assert [t.outcome for t in read_jsonl(out).timelines] == [Outcome.COMPLETE] * 3


async def test_the_gate_judges_the_recorded_file(lab: LabServer, tmp_path: Path) -> None:
    smooth, frozen = tmp_path / "smooth.jsonl", tmp_path / "frozen.jsonl"
    write_jsonl(smooth, steady_run(gap_ms=1.0))  # far smoother than any real server
    write_jsonl(frozen, frozen_run())
    failed = await run_bench(config(lab.base_url, tmp_path / "a.jsonl", requests=2, gate=smooth))
    assert failed.verdict is not None
    assert not failed.verdict.passed
    assert failed.verdict.baseline == smooth
    loose = ["unstable_share=+100pt"]  # a stray slow gap must not decide this test
    passed = await run_bench(
        config(lab.base_url, tmp_path / "b.jsonl", requests=2, gate=frozen, max_regression=loose)
    )
    assert passed.verdict is not None
    assert passed.verdict.passed


async def test_a_sweep_measures_each_load(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    heard = Heard()
    settings = config(lab.base_url, out, sweep="concurrency=1,2", requests=2, cooldown="0s")
    outcome = await run_bench(settings, hooks=heard)
    assert outcome.sweep is not None
    assert [p.load for p in outcome.sweep.points] == [1.0, 2.0]
    assert outcome.sweep.answer == 2.0
    assert outcome.summary is None
    assert heard.ended == 2
    assert outcome.written == 4
    assert {t.labels["load"] for t in read_jsonl(out).timelines} == {
        "concurrency=1",
        "concurrency=2",
    }


async def test_nothing_succeeding_is_said_and_never_gated(lab: LabServer, tmp_path: Path) -> None:
    baseline = tmp_path / "base.jsonl"
    write_jsonl(baseline, steady_run())
    url = lab.base_url.removesuffix("/v1")  # the server's root: every request gets 404
    outcome = await run_bench(
        config(url, tmp_path / "r.jsonl", requests=2, warmup=0, gate=str(baseline))
    )
    assert outcome.nothing_succeeded
    assert "HTTP 404" in outcome.first_error
    assert f"did you mean {lab.base_url}?" in outcome.first_error
    assert outcome.verdict is None


async def test_a_server_not_there_is_one_error_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(UpstreamConnectError, match=r"cannot connect to http://127\.0\.0\.1"):
        await run_bench(config(url, out, requests=2, warmup=0))
    assert not out.exists()


async def test_cancelling_keeps_what_finished(lab: LabServer, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    heard = Heard()
    task = asyncio.create_task(
        run_bench(config(lab.base_url, out, requests=500, concurrency=2), hooks=heard)
    )
    deadline = asyncio.get_running_loop().time() + 30
    while not heard.runners or heard.runners[0].progress.snapshot().finished < 3:
        assert asyncio.get_running_loop().time() < deadline
        assert not task.done()
        await asyncio.sleep(0.02)  # a real lab streams on the real clock
    task.cancel()
    outcome = await task
    assert outcome.interrupted
    assert outcome.result is not None
    assert outcome.verdict is None
    assert heard.ended == 1
    kept = read_jsonl(out).timelines
    assert len(kept) == outcome.written
    assert 3 <= len(kept) < 500
    assert outcome.summary is not None
    assert any("interrupted" in note for note in outcome.summary.notes)


async def test_a_refused_ray_bench_leaves_the_output_file_as_it_was(tmp_path: Path) -> None:
    """No Ray cluster answers at the address (or, in a session that already runs a 2-CPU Ray,
    3 workers are too many): refused before the output file is opened."""
    pytest.importorskip("ray")
    out = tmp_path / "run.jsonl"
    write_jsonl(out, steady_run())
    before = out.read_bytes()
    ray_address = f"127.0.0.1:{closed_port()}"
    settings = config(
        "http://127.0.0.1:1/v1", out, requests=2, concurrency=3, workers=3, ray_address=ray_address
    )
    with pytest.raises(SteadystreamError):
        await run_bench(settings)
    assert out.read_bytes() == before
