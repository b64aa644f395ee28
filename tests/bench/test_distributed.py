"""bench on Ray: two actors share one schedule against the lab (a local Ray of 2 CPUs)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Outcome, SpecError, SteadystreamError, Timeline
from steadystream.bench import CancelPoint, CancelPolicy, Endpoint, OpenLoop, RunOptions, Workload
from steadystream.bench.distributed import RayBench
from steadystream.bench.schedule import ClosedLoop, Share, share_of
from steadystream.bench.session import BenchSettings
from steadystream.bench.worker import BenchWorker
from steadystream.bench.workload import builtin_prompts
from steadystream.cli import _register, app
from steadystream.files import JsonlWriter, read_jsonl, write_jsonl
from steadystream.lab import LabServer
from tests.support.bench import steady_run


def settings(lab: LabServer) -> BenchSettings:
    return BenchSettings(
        Endpoint(lab.base_url, "lab"),
        Workload(builtin_prompts(), max_tokens=12, seed=3),
        labels={"route": "chat"},
    )


@pytest.mark.asyncio
async def test_two_workers_send_the_one_schedule_into_one_file(
    lab: LabServer, ray_local: Any, tmp_path: Path
) -> None:
    output = tmp_path / "run.jsonl"
    options = RunOptions(
        max_requests=16, cancel=CancelPolicy(0.25, CancelPoint.parse("3tok"), seed=3)
    )
    with JsonlWriter(output) as writer:
        async with RayBench(settings(lab), workers=2) as bench:
            assert await bench.warm_up(1) == 2  # one per worker, on its own connections
            runner = bench.prepare(OpenLoop(rate=40.0, seed=3), options, sink=writer.write)
            result = await runner.run()
            assert len(set(bench.where)) == 2  # two processes

    # Every request of the one schedule, once, with the ids and labels one process gives.
    indices = sorted(t.meta["request_index"] for t in result.timelines)
    assert indices == list(range(16))
    ids = {t.stream_id for t in result.timelines}
    assert ids == {f"{options.run_id}-{i:06d}" for i in range(16)}
    assert all(t.labels["route"] == "chat" for t in result.timelines)
    # The cancellation policy picks the same requests by their global index.
    policy = options.cancel
    assert policy is not None
    cancelled = {
        t.meta["request_index"] for t in result.timelines if t.outcome is Outcome.CANCELLED
    }
    assert cancelled == {i for i in range(16) if policy.for_request(i) is not None}
    # One file, every stream; one progress; each worker's self-check named.
    assert sorted(t.stream_id for t in read_jsonl(output).timelines) == sorted(ids)
    assert result.progress.sent == result.progress.finished == 16
    workers = [n for n in result.notes if n.startswith("worker ")]
    assert [n.split(" (")[0] for n in workers] == ["worker 1 of 2", "worker 2 of 2"]
    assert all(": 8 streams;" in n for n in workers)
    assert result.schedule.endswith("over 2 Ray workers")
    assert result.schedule_lag.samples == 16
    # Arrivals on the one global schedule: request i was due at the i-th global offset.
    assert Counter(t.meta["request_index"] % 2 for t in result.timelines) == {0: 8, 1: 8}


@pytest.mark.asyncio
async def test_more_workers_than_the_cluster_has_cpus_is_refused(
    lab: LabServer, ray_local: Any
) -> None:
    cpus = int(ray_local.cluster_resources()["CPU"])
    with pytest.raises(SpecError, match=f"--workers {cpus + 1} is more than the Ray cluster's"):
        async with RayBench(settings(lab), workers=cpus + 1):
            pass


@pytest.mark.asyncio
async def test_stop_and_interrupt_reach_every_worker(lab: LabServer, ray_local: Any) -> None:
    async with RayBench(settings(lab), workers=2) as bench:
        with pytest.raises(SpecError, match="--workers 2 is more than --concurrency 1"):
            await bench.run(ClosedLoop(1), RunOptions(max_requests=4))
        runner = bench.prepare(ClosedLoop(2), RunOptions(duration_ns=60_000_000_000))
        task = asyncio.create_task(runner.run())
        while runner.progress.finished < 4:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        result = runner.result()
    assert result.interrupted
    assert result.progress.in_flight == 0
    assert Counter(t.outcome for t in result.timelines)[Outcome.CANCELLED] >= 1


@pytest.mark.asyncio
async def test_a_worker_that_dies_is_one_clear_error(lab: LabServer, ray_local: Any) -> None:
    async with RayBench(settings(lab), workers=2) as bench:
        runner = bench.prepare(ClosedLoop(2), RunOptions(duration_ns=60_000_000_000))
        task = asyncio.create_task(runner.run())
        while runner.progress.finished < 2:
            await asyncio.sleep(0.05)
        ray_local.kill(bench._actors[1])  # as a node going away would
        with pytest.raises(SteadystreamError, match="a Ray worker failed"):
            await task
        assert runner.progress.finished >= 2  # what finished before is kept


# -- the command line ---------------------------------------------------------------------------

cli = CliRunner()
_register()


def bench_args(lab: LabServer, out: Path, *extra: str) -> list[str]:
    return [
        "bench",
        lab.base_url,
        "-m",
        "lab",
        "-o",
        str(out),
        "--no-live",
        "--max-tokens",
        "8",
        *extra,
    ]


def test_cli_ray_run_and_sweep_record_one_file(
    lab: LabServer, ray_local: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run.jsonl"
    result = cli.invoke(
        app,
        [
            *bench_args(lab, out, "--ray", "--workers", "2"),
            "--rate",
            "30",
            "--requests",
            "6",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.output)
    assert summary["fleet"]["streams"] == 6
    assert sum(note.startswith("worker ") for note in summary["notes"]) == 2
    assert len(read_jsonl(out).timelines) == 6

    # The gate judges the merged run as it judges one process's.
    smooth = tmp_path / "smooth.jsonl"
    write_jsonl(smooth, steady_run(gap_ms=1.0))  # far smoother than any real server
    gate = ["--concurrency", "2", "--requests", "4", "--gate", str(smooth)]
    gated = cli.invoke(
        app, [*bench_args(lab, tmp_path / "g.jsonl", "--ray", "--workers", "2"), *gate]
    )
    assert gated.exit_code == 1, gated.output
    assert "gate failed" in gated.output

    swept = tmp_path / "sweep.jsonl"
    args = bench_args(lab, swept, "--ray", "--workers", "2", "--sweep", "concurrency=2,4")
    result = cli.invoke(app, [*args, "--requests", "4", "--slo", "goodput>=0%", "--cooldown", "0s"])
    assert result.exit_code == 0, result.output
    assert "fluid capacity: 4" in " ".join(result.output.split())
    loads = Counter(t.labels["load"] for t in read_jsonl(swept).timelines)
    assert loads == {"concurrency=2": 4, "concurrency=4": 4}


def test_cli_ray_options_are_checked_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run.jsonl"
    result = cli.invoke(app, bench_args_for("http://127.0.0.1:9/v1", out, "--workers", "2"))
    assert result.exit_code == 2
    assert "--workers spreads a run over Ray actors: add --ray" in " ".join(result.output.split())
    result = cli.invoke(
        app, bench_args_for("http://127.0.0.1:9/v1", out, "--ray", "--workers", "2")
    )
    assert result.exit_code == 2  # the default closed loop has one stream in flight
    assert "--workers 2 is more than --concurrency 1" in " ".join(result.output.split())
    # A concurrency sweep starts at its smallest load: refused before Ray or the file.
    for sweep in ("concurrency=1,4", "concurrency=search:1-8"):
        out.write_text("kept\n")
        args = bench_args_for("http://127.0.0.1:9/v1", out, "--ray", "--workers", "2")
        result = cli.invoke(app, [*args, "--sweep", sweep])
        assert result.exit_code == 2
        assert "--workers 2 is more than the sweep's smallest concurrency, 1" in " ".join(
            result.output.split()
        )
        assert out.read_text() == "kept\n"
    result = cli.invoke(app, bench_args_for("http://127.0.0.1:9/v1", out, "--ray-address", " "))
    assert result.exit_code == 2
    assert "--ray-address: empty" in result.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    result = cli.invoke(app, bench_args_for("http://127.0.0.1:9/v1", out, "--ray"))
    assert result.exit_code == 2
    assert "pip install 'steadystream[ray]'" in result.output


def bench_args_for(url: str, out: Path, *extra: str) -> list[str]:
    return ["bench", url, "-m", "lab", "-o", str(out), "--no-live", "--warmup", "0", *extra]


# -- one worker, in this process (what each Ray actor runs) -------------------------------------


@pytest.mark.asyncio
async def test_a_worker_runs_its_share_and_reports_it(lab: LabServer) -> None:
    worker = BenchWorker(settings(lab), worker=1)
    assert "pid" in await worker.open()
    assert await worker.warm_up(1) == 1
    share = share_of(ClosedLoop(2), Share(1, 2))
    now = time.time_ns()
    await worker.start(share, RunOptions(max_requests=3, run_id="ssw"), {"route": "x"}, now)
    with pytest.raises(RuntimeError, match="already in progress"):
        await worker.start(share, RunOptions(max_requests=3), {}, now)
    timelines: list[Timeline] = []
    report = None
    while report is None:
        await asyncio.sleep(0.05)
        poll = await worker.poll()
        timelines += poll.timelines
        report = poll.report
    assert poll.sent == 3
    assert sorted(t.stream_id for t in timelines) == ["ssw-000001", "ssw-000003", "ssw-000005"]
    assert all(t.labels["route"] == "x" for t in timelines)
    assert (report.worker, report.error, report.interrupted) == (1, None, False)
    assert len(report.schedule_lag_ns) == 3
    assert len(report.loop_lag_ns) > 0
    assert (await worker.poll()).report is None  # reported once

    # stop: no more requests, the run ends by itself; interrupt: the run is cut.
    await worker.start(ClosedLoop(1), RunOptions(duration_ns=60_000_000_000), {}, time.time_ns())
    await asyncio.sleep(0.3)
    await worker.stop()
    while (poll := await worker.poll()).report is None:
        await asyncio.sleep(0.05)
    assert not poll.report.interrupted
    await worker.start(ClosedLoop(1), RunOptions(duration_ns=60_000_000_000), {}, time.time_ns())
    await asyncio.sleep(0.3)
    await worker.interrupt()
    assert (await worker.poll()).report.interrupted  # type: ignore[union-attr]
    await worker.close()
    with pytest.raises(RuntimeError, match="open"):
        await worker.warm_up(1)
