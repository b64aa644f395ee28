"""The engine-metrics sidecar's file: a run's own starts empty, a shared one survives a cut
line, a huge line is refused a line at a time, and analyze without causes never reads it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from steadystream import engine_metrics
from steadystream._exceptions import InputError
from steadystream.cli import _register, app
from steadystream.engine_metrics import EngineScraper, read_engine_metrics, sidecar_path
from steadystream.files import write_jsonl
from steadystream.lab import LabServer
from tests.support.timelines import paused_stream

_register()
runner = CliRunner()


def _scrape(url: str, path: Path, scrapes: int, *, shared: bool) -> EngineScraper:
    async def scrape() -> EngineScraper:
        async with aiohttp.ClientSession() as session:
            scraper = EngineScraper(url, path, session, interval_s=0.01, shared=shared)
            stop = asyncio.Event()
            task = asyncio.create_task(scraper.run(stop))
            while scraper.scrapes < scrapes and not task.done():
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.wait_for(task, 5)
            return scraper

    return asyncio.run(scrape())


def test_a_runs_own_sidecar_starts_empty_and_a_shared_one_drops_a_cut_line(
    tmp_path: Path,
) -> None:
    own, shared = tmp_path / "run.engine-metrics.jsonl", tmp_path / "engine-metrics-lab.jsonl"
    with LabServer("steady") as lab:
        url = f"{lab.url}/metrics"
        _scrape(url, own, 3, shared=False)
        second = _scrape(url, own, 2, shared=False)
        _scrape(url, shared, 2, shared=True)
        kept = shared.read_bytes()
        shared.write_bytes(kept + b'{"schema": "steadystream.engine-metr')  # a writer died
        again = _scrape(url, shared, 2, shared=True)
    # A second run into the same output holds its own scrapes only, as its run file does.
    assert len(read_engine_metrics(own)) == second.scrapes
    # The shared file keeps every whole line and reads to its end.
    data = shared.read_bytes()
    assert data.startswith(kept)
    assert data.endswith(b"\n")
    assert [orjson.loads(line)["schema"] for line in data.splitlines()]
    assert len(read_engine_metrics(shared)) == len(kept.splitlines()) + again.scrapes


def test_a_line_past_the_bound_is_refused_without_reading_the_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_metrics, "_MAX_LINE_BYTES", 1 << 10)
    path = tmp_path / "m.jsonl"
    line = {"schema": engine_metrics.SCHEMA, "t": 1.7e9, "values": {"a": 1.0}}
    path.write_bytes(orjson.dumps(line) + b"\n" + b" " * 5000 + b"{}\n")
    with pytest.raises(InputError, match=r"m.jsonl: line 2 is longer than 0 MiB"):
        read_engine_metrics(path)
    path.write_bytes(orjson.dumps(line) + b"\n" + orjson.dumps(line)[:20])
    assert len(read_engine_metrics(path)) == 1  # (a cut last line: what came before)


def test_analyze_without_causes_does_not_read_the_sidecar(tmp_path: Path) -> None:
    run = tmp_path / "r.jsonl"
    write_jsonl(run, [paused_stream()])
    sidecar_path(run).write_text('{"t": "soon"}\n{}\n', encoding="utf-8")
    result = runner.invoke(app, ["analyze", str(run), "--no-explain"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["analyze", str(run)])
    assert result.exit_code == 2
    assert "r.engine-metrics.jsonl: line 1" in result.output
