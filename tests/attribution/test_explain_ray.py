"""`explain --ray` (and `analyze --ray`'s stall causes): exactly the single-process answer.

The fleet is the lab's `mixed` preset run in simulated time (its ground truth holds several
causes), its streams dealt round-robin into three files, so that every stall's streams in
flight lie in other files too; a second fixture puts a request's gateway edge in another
file than its client timeline, with engine metrics beside the first file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Timeline, TimelineFormatError, Where
from steadystream.attribution import explain, score
from steadystream.attribution.streams import outer_ranks, stream_numbers
from steadystream.bench.verdict import load_runs
from steadystream.cli import _register, app
from steadystream.engine_metrics import SCHEMA, sidecar_path
from steadystream.explanations import (
    _attribute_group,
    _FileHead,
    _read_file,
    _subject_mask,
    explain_files,
)
from steadystream.files import write_jsonl, write_timelines
from steadystream.metrics import MetricConfig
from tests.support.attribution import T0, cadence, stream
from tests.support.lab import arrivals, run_lab

_register()
runner = CliRunner()

NAMES = ("a.jsonl", "b.parquet", "c.jsonl.gz")
THRESHOLD_NS = 400_000_000


@pytest.fixture(scope="module")
def lab_truth() -> list[Timeline]:
    """40 requests 150 ms apart on the lab's `mixed` preset, simulated: its truth timelines."""
    plan = arrivals([i * 150.0 for i in range(40)], prompt_tokens=200, max_tokens=150)
    run = asyncio.run(run_lab("mixed", plan, seed=3))
    return [truth.to_timeline() for truth in run.truths]


@pytest.fixture
def lab_files(tmp_path: Path, lab_truth: list[Timeline]) -> list[Path]:
    paths = [tmp_path / name for name in NAMES]
    for k, path in enumerate(paths):
        write_timelines(path, lab_truth[k :: len(paths)])
    return paths


def test_ray_gives_the_single_process_explanation(
    lab_files: list[Path], lab_truth: list[Timeline], ray_local: Any
) -> None:
    timelines, _ = load_runs(lab_files)
    here = explain(timelines, stall_threshold_ns=THRESHOLD_NS, worst=5)
    on_ray = explain_files(lab_files, stall_threshold_ns=THRESHOLD_NS, worst=5).explanation
    assert on_ray is not None
    assert on_ray.to_json() == here.to_json()
    assert on_ray.stalls == here.stalls  # every field, unrounded confidences and wall times
    assert score(on_ray, lab_truth) == score(here, lab_truth)
    # The fixture is worth its name: several causes, and the most hurt streams of all files.
    assert len(here.by_cause) >= 3
    assert len(here.hurt) == 5
    assert len({s.stream_id for s in here.stalls}) > 5
    # ... and explaining each file on its own would not do: the other files' streams in
    # flight change the evidence of some stalls.
    alone = [
        stall
        for path in lab_files
        for stall in explain(load_runs([path])[0], stall_threshold_ns=THRESHOLD_NS).stalls
    ]
    assert sorted(s.evidence for s in alone) != sorted(s.evidence for s in here.stalls)


def cross_files(tmp_path: Path) -> list[Path]:
    """Request `a` seen at the client (file 1) and at the gateway (file 2); `b`..`e` pause
    with each other across both files; `g` has no wall clock, `h` no text; file 4 is empty;
    engine metrics beside file 1 (a preemption)."""
    gap = [*cadence(30, 10), *cadence(30 + 9 * 25 + 600, 10)]  # 600 ms, ending at text 10
    client = [stream(gap, stream_id="a")]
    client += [stream(gap, stream_id=s, start_ms=5) for s in ("b", "c")]
    client += [stream(gap, stream_id="g").replace(started_at=None), stream([], stream_id="h")]
    gateway = [stream(cadence(28, 30), stream_id="a", where=Where.GATEWAY_UPSTREAM)]
    gateway += [stream(gap, stream_id=s, start_ms=5) for s in ("d", "e")]
    late = [stream([*cadence(30, 5), 3000.0], stream_id="f", start_ms=8000)]
    names = ("client.jsonl", "gateway.jsonl", "late.parquet", "none.jsonl")
    paths = [tmp_path / name for name in names]
    for path, timelines in zip(paths, (client, gateway, late, []), strict=True):
        write_timelines(path, timelines)
    lines = [
        {"schema": SCHEMA, "t": T0 + 7.5 + t / 4, "values": {"vllm:num_preemptions_total": t}}
        for t in range(20)
    ]
    sidecar_path(paths[0]).write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return paths


def test_cli_explain_ray_joins_edges_and_engine_across_files(
    tmp_path: Path, ray_local: Any
) -> None:
    paths = cross_files(tmp_path)
    causes: list[str | None] = [None] * 20
    causes[10] = "connection-hiccup"
    truth = tmp_path / "truth.jsonl"
    write_jsonl(truth, [stream(cadence(20, 20), stream_id="a", where=Where.LAB, cause=causes)])
    args = ["explain", *map(str, paths), "--json", "--truth", str(truth), "--worst", "3"]
    on_ray, here = runner.invoke(app, [*args, "--ray"]), runner.invoke(app, args)
    assert on_ray.exit_code == here.exit_code == 0, on_ray.output + here.output
    ray_data, here_data = orjson.loads(on_ray.output), orjson.loads(here.output)
    assert ray_data == here_data
    by_stream = {s["stream_id"]: s for s in here_data["stalls"]}
    assert "absent at gateway-upstream" in by_stream["a"]["evidence"]  # the edge in file 2
    assert "paused and resumed with it" in by_stream["b"]["evidence"]  # d, e in file 2
    assert by_stream["f"]["cause"] == "kv-preemption"
    assert by_stream["f"]["confidence"] == 0.9  # the engine metrics beside file 1
    assert "did not pause with it" not in by_stream["g"]["evidence"]  # no clock, no neighbours
    # the scrapes span f's stall alone: the others were read without them
    stalls = len(here_data["stalls"])
    assert f"engine metrics (20 scrapes, over 1 of the {stalls} stalls)" in here_data["sources"]
    assert len(here_data["most_hurt"]) == 3
    assert here_data["truth"]["unmatched_stalls"] == len(here_data["stalls"]) - 1


def test_cli_analyze_ray_attributes_the_stalls_too(tmp_path: Path, ray_local: Any) -> None:
    cross_files(tmp_path)
    args = ["analyze", str(tmp_path), "--json"]
    on_ray, here = runner.invoke(app, [*args, "--ray"]), runner.invoke(app, args)
    assert on_ray.exit_code == here.exit_code == 0, on_ray.output + here.output
    ray_data, here_data = orjson.loads(on_ray.output), orjson.loads(here.output)
    assert here_data["stall_causes"]
    for key in ("fleet", "worst_streams", "findings", "stall_causes", "notes"):
        assert ray_data[key] == here_data[key], key
    # --no-explain: the metrics alone, on Ray as here
    bare = orjson.loads(runner.invoke(app, [*args, "--ray", "--no-explain"]).output)
    assert bare["stall_causes"] is None
    assert bare["fleet"] == here_data["fleet"]


def test_a_bad_file_is_the_same_clear_error_on_ray(tmp_path: Path, ray_local: Any) -> None:
    paths = cross_files(tmp_path)
    bad = tmp_path / "d.jsonl"
    bad.write_bytes(b'{"schema": "steadystream.timeline/1"}\n')
    with pytest.raises(TimelineFormatError) as here:
        load_runs([*paths, bad])
    with pytest.raises(TimelineFormatError) as on_ray:
        explain_files([*paths, bad], stall_threshold_ns=THRESHOLD_NS)
    assert str(on_ray.value) == str(here.value)
    result = runner.invoke(app, ["explain", str(tmp_path), "--ray"])
    assert result.exit_code == 2
    assert "d.jsonl:1" in result.output


def test_analyze_ray_says_when_glass_keeps_it_from_attributing(
    tmp_path: Path, ray_local: Any
) -> None:
    paths = cross_files(tmp_path)
    glass = stream(cadence(30, 20), stream_id="a", where=Where.GLASS)
    write_timelines(tmp_path / "page.jsonl", [glass])
    config = MetricConfig()
    done = explain_files(
        [*paths, tmp_path / "page.jsonl"], stall_threshold_ns=THRESHOLD_NS, config=config
    )
    assert done.explanation is None
    assert done.tables is not None
    assert len(done.tables.table) == 10  # every file's streams, the glass one too
    assert any("glass timelines beside others" in note for note in done.notes)
    # without a stall there is nothing to attribute, and nothing to say
    calm = tmp_path / "calm"
    calm.mkdir()
    write_timelines(calm / "run.jsonl", [stream(cadence(30, 20), stream_id="z")])
    quiet = explain_files([calm / "run.jsonl"], stall_threshold_ns=THRESHOLD_NS, config=config)
    assert quiet.explanation is None
    assert quiet.notes == []


def test_the_rounds_run_in_this_process_too(tmp_path: Path) -> None:
    """The task functions, called here (coverage does not follow them into Ray's workers)."""
    paths = cross_files(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{}\n")
    assert isinstance(_read_file(bad, None)[0], TimelineFormatError)
    head, views, clocks = _read_file(paths[1], MetricConfig())
    assert isinstance(head, _FileHead)
    assert views is not None
    assert clocks is not None
    assert head.table is not None
    assert head.ids == ["a", "d", "e"]
    # as if ten timelines of other files came before it
    numbers = stream_numbers(head.ids, head.wheres, [0] * len(head.ids))
    fleet = clocks.select(_subject_mask(head, numbers, outer_ranks(numbers, head.ranks)), shift=10)
    tagged, seen = _attribute_group(THRESHOLD_NS, None, fleet, [10], [numbers], views)
    here = explain(load_runs([paths[1]])[0], stall_threshold_ns=THRESHOLD_NS)
    assert [stall for _, stall in tagged] == here.stalls
    assert [index for index, _ in tagged] == [11, 12]  # shifted by the file's offset
    assert seen.streams == here.streams == 3
