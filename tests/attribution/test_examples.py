"""The project's own examples explained right, and findings that do not contradict each other."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Event, EventKind, Timeline, TokenSource, Where
from steadystream.attribution import explain, score
from steadystream.cli import _register, app
from steadystream.files import read_timelines, write_jsonl, write_timelines
from steadystream.findings import PER_GAP_FIGURES, find, is_rechunked
from steadystream.lab.truth import RequestTruth
from steadystream.metrics import MetricConfig, fleet_metrics, stream_table
from steadystream.replay import parse_injection
from steadystream.replay.server import ReplayServer
from steadystream.report import build_report
from steadystream.report.cards import headline_cards

_register()
runner = CliRunner()

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAMPLE = EXAMPLES / "sample-run.jsonl"
SAMPLE_TRUTH = EXAMPLES / "sample-run.truth.jsonl"
MS = 1_000_000


def sample_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_sample_run", EXAMPLES / "make_sample_run.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sample_and_its_truth_are_what_the_script_makes(tmp_path: Path) -> None:
    """Byte for byte: the run the README and the docs quote, and what was put into it."""
    script = sample_script()
    write_timelines(tmp_path / "run.jsonl", script.sample_run())
    write_timelines(tmp_path / "truth.jsonl", script.sample_truth())
    assert (tmp_path / "run.jsonl").read_bytes() == SAMPLE.read_bytes()
    assert (tmp_path / "truth.jsonl").read_bytes() == SAMPLE_TRUTH.read_bytes()


def test_the_sample_run_is_explained_as_its_script_made_it() -> None:
    """make_sample_run.py says what it put in (a preemption mid-answer, a held head); explain
    gives at least 90 % of the stall time, by overlap of time, to those causes."""
    done = explain(read_timelines(SAMPLE).timelines)
    truth = read_timelines(SAMPLE_TRUTH).timelines
    assert {t.where for t in truth} == {Where.LAB}
    scored = score(done, truth)
    assert scored.unmatched == 0
    assert scored.no_cause_s == 0  # every stall is one the script made
    assert scored.share_right is not None
    assert scored.share_right >= 0.9
    assert scored.true_causes == ["kv-preemption", "head-burst"]
    paused = [s for s in done.stalls if s.stream_id.startswith("paused-")]
    assert len(paused) == 6
    assert {s.cause for s in paused} == {"kv-preemption"}
    assert all(s.text_index == 100 for s in paused)  # where the script preempted them


def test_the_sample_runs_head_burst_is_a_head_burst() -> None:
    """examples/make_sample_run.py holds the first 30 tokens of six streams and releases
    them at once: a server's policy, not six connections that froze (30 streams, so the
    bursting ones are a fifth of them)."""
    done = explain(read_timelines(SAMPLE).timelines)
    heads = [s for s in done.stalls if s.stream_id.startswith("head-burst-")]
    assert len(heads) == 6
    assert {s.cause for s in heads} == {"head-burst"}
    assert all("same size" in s.evidence for s in heads)
    assert "connection-hiccup" not in {s.cause for s in done.stalls}


def test_one_stream_with_a_head_lump_is_still_a_hiccup() -> None:
    def one(stream_id: str, lump: int, start: float) -> Timeline:
        times = [500.0] * lump + [500.0 + 25 * k for k in range(1, 30)]
        events = [Event(0, "", 0, EventKind.ROLE)]
        events += [Event(round(t * MS), "w ", 1, EventKind.CONTENT) for t in times]
        return Timeline.from_events(
            events, stream_id=stream_id, where=Where.CLIENT, started_at=1_767_225_600 + start
        )

    # sizes far apart: no policy in common
    smooth = [one(name, 1, 0.2 + 0.1 * k) for k, name in enumerate("cdef")]
    done = explain([one("a", 8, 0.0), one("b", 20, 0.1), *smooth])
    causes = {s.stream_id: s.cause for s in done.stalls}
    assert causes["a"] == causes["b"] == "connection-hiccup"


def paced_run(source: TokenSource, streams: int = 12) -> list[Timeline]:
    """Streams of 2 ms pieces of a token, with a 60 ms gap every fifth (a pacer's cadence)."""
    out = []
    rng = np.random.default_rng(3)
    for i in range(streams):
        t, events = 100.0, [Event(0, "", 0, EventKind.ROLE)]
        for k in range(120):
            t += 60.0 if k % 5 == 0 else 2.0 + rng.random()
            events.append(Event(round(t * MS), "ab", 0 if k % 2 else 1, EventKind.CONTENT))
        out.append(
            Timeline.from_events(
                events,
                stream_id=f"p{i}",
                where=Where.CLIENT,
                token_source=source,
                started_at=1_767_225_600 + i,
            )
        )
    return out


def test_findings_that_read_a_pacers_pieces_are_not_made_on_a_rechunked_run() -> None:
    config = MetricConfig()
    plain = stream_table(paced_run(TokenSource.EXACT), config)
    pieces = stream_table(paced_run(TokenSource.USAGE_SHARED), config)
    assert not is_rechunked(plain)
    assert is_rechunked(pieces)
    said = {f.code: f for f in find(plain, fleet_metrics(plain, config), config)}
    assert {"unstable-streams", "single-token-chunks"} <= set(said)
    assert "re-chunking pacer" in said["single-token-chunks"].message
    findings = find(pieces, fleet_metrics(pieces, config), config)
    codes = {f.code for f in findings}
    assert not codes & {"unstable-streams", "single-token-chunks"}
    (cut,) = [f for f in findings if f.code == "tokens-in-pieces"]
    assert "not read as the server's" in cut.message
    # every finding names the figure it rests on
    assert all(f.figure for f in [*findings, *said.values()])


def test_the_chunks_chart_does_not_tell_a_paced_run_to_get_a_pacer() -> None:
    def reading(run: list[Timeline]) -> str:
        (chart,) = [c for c in build_report(run).charts if c.id == "chunks"]
        return chart.how_to_read

    assert "a re-chunking pacer coalesces them" in reading(paced_run(TokenSource.EXACT))
    paced = reading(paced_run(TokenSource.USAGE_SHARED))
    assert "coalesces them" not in paced
    assert "not the server's" in paced


def test_cards_do_not_compare_per_gap_figures_across_a_rechunker() -> None:
    config = MetricConfig()
    before = fleet_metrics(stream_table(paced_run(TokenSource.EXACT), config), config)
    after = fleet_metrics(stream_table(paced_run(TokenSource.USAGE_SHARED), config), config)
    cards = {c.key: c for c in headline_cards(after, before, uncompared=PER_GAP_FIGURES)}
    assert cards["unstable_share"].verdict is None
    assert "not compared" in cards["unstable_share"].note
    assert cards["p99_of_worst_gap_s"].baseline is not None


@pytest.mark.integration
def test_a_replays_injected_pause_is_named_and_scored(tmp_path: Path) -> None:
    """replay --inject pause:1s@50%: its /metrics count the pauses played, so explain names
    them injected-fault (not kv-preemption), and its ground truth (--record) scores it."""
    sample = [t for t in read_timelines(SAMPLE).timelines if t.stream_id.startswith("steady-")]
    played: list[RequestTruth] = []
    out = tmp_path / "run.jsonl"
    with ReplayServer(
        sample, injections=[parse_injection("pause:1s@50%")], on_done=played.append
    ) as replay:
        args = ["bench", replay.base_url, "-m", "lab", "-o", str(out), "--no-live"]
        args += ["--requests", "3", "--concurrency", "1", "--warmup", "0"]
        result = runner.invoke(app, [*args, "--engine-metrics", "auto"])
    assert result.exit_code == 0, result.output
    truth = tmp_path / "truth.jsonl"
    write_jsonl(truth, [record.to_timeline() for record in played])
    assert len(played) == 3
    explained = runner.invoke(app, ["explain", str(out), "--truth", str(truth), "--json"])
    assert explained.exit_code == 0, explained.output
    payload = orjson.loads(explained.output)
    injected = [s for s in payload["stalls"] if s["duration_s"] > 0.9]
    recorded = read_timelines(out).timelines
    worst = {t.stream_id: (t.outcome.value, t.error, float(np.diff(t.times).max(initial=0)) / 1e9)
             for t in recorded}  # fmt: skip
    assert len(injected) == 3, (worst, payload["stalls"])
    assert {s["cause"] for s in injected} == {"injected-fault"}
    assert payload["truth"]["matrix_s"]["injected-fault"] == {
        "injected-fault": pytest.approx(sum(s["duration_s"] for s in injected))
    }
    assert payload["truth"]["unmatched_stalls"] == 0
