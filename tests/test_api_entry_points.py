"""The public entry points take what a caller naturally hands them, or say what is wrong.

An iterable of timelines is read once (a generator is not an empty run); one text where a
list of texts or paths is asked for is refused, naming the parameter (never read letter by
letter); ``files`` holds one file number per timeline; and the library's documented way to
measure a fleet counts a stream seen at several vantage points once, as the CLI does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import steadystream as ss
from steadystream.bench.summary import summarise
from tests.support.timelines import make_timeline, paused_stream, steady_stream

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample-run.jsonl"


def _run() -> list[ss.Timeline]:
    return [
        steady_stream(),
        paused_stream(),
        make_timeline([100, 900, 1000], stream_id="late"),
    ]


# -- an iterable is read once --------------------------------------------------------------


def test_build_report_reads_a_generator_as_the_run_it_holds() -> None:
    run = _run()
    listed = ss.build_report(run)
    generated = ss.build_report(t for t in run)
    assert generated.run[0] == listed.run[0]
    assert generated.fleet.streams == len(run)


def test_build_report_reads_a_generator_baseline_as_the_run_it_holds() -> None:
    run = _run()
    report = ss.build_report(run, baseline=(t for t in run))
    assert report.baseline is not None
    assert report.baseline.streams == len(run)


def test_explain_reads_a_generator_as_the_run_it_holds() -> None:
    run = _run()
    assert ss.explain(t for t in run) == ss.explain(run)


def test_what_if_reads_generators_of_timelines_and_pacers() -> None:
    run = _run()
    pacers = [ss.parse_pacer("leaky:interval=20ms")]
    listed = ss.what_if(run, pacers)
    generated = ss.what_if((t for t in run), (p for p in pacers))
    assert generated.streams == listed.streams == len(run)
    assert generated.to_dict() == listed.to_dict()


def test_what_if_refuses_something_that_is_not_a_pacer_naming_pacers() -> None:
    with pytest.raises(TypeError, match=r"pacers"):
        ss.what_if(_run(), "leaky")  # type: ignore[arg-type]


def test_what_if_over_no_streams_names_no_best_pacer() -> None:
    result = ss.what_if([], [ss.parse_pacer("leaky"), ss.parse_pacer("adaptive")])
    assert result.streams == 0
    assert result.best is None
    assert result.best_pacer is None


# -- files: one file number per timeline ---------------------------------------------------


@pytest.mark.parametrize("files", [[0], [0, 0, 0, 0]])
def test_explain_refuses_files_of_another_length_naming_files(files: list[int]) -> None:
    with pytest.raises(ValueError, match=r"files holds \d+ file numbers for 3 timelines"):
        ss.explain(_run(), files=files)


def test_build_report_refuses_files_of_another_length_naming_files() -> None:
    with pytest.raises(ValueError, match=r"^files holds 1 file numbers for 3 timelines"):
        ss.build_report(_run(), files=[0])


def test_build_report_refuses_baseline_files_of_another_length_naming_them() -> None:
    with pytest.raises(ValueError, match=r"^baseline_files holds 2 file numbers"):
        ss.build_report(_run(), baseline=_run(), baseline_files=[0, 1])


def test_explain_takes_files_from_a_generator() -> None:
    run = _run()
    assert ss.explain(run, files=(0 for _ in run)) == ss.explain(run, files=[0] * len(run))


# -- one text where a list is asked for ----------------------------------------------------


@pytest.mark.parametrize("name", ["sources", "baseline_sources", "notes"])
def test_build_report_refuses_one_text_for_a_list_naming_the_parameter(name: str) -> None:
    with pytest.raises(TypeError, match=f"^{name} must be a list of texts"):
        ss.build_report(_run(), **{name: "run.jsonl"})  # type: ignore[arg-type]


def test_build_report_names_each_source_given_in_a_list() -> None:
    report = ss.build_report(_run(), sources=["run.jsonl"])
    assert "from run.jsonl," in report.run[0]


@pytest.mark.parametrize("path", [str(SAMPLE), SAMPLE, os.fsencode(SAMPLE)])
def test_analyze_files_refuses_one_path_naming_paths(path: object) -> None:
    with pytest.raises(TypeError, match=r"^paths must be a list of files or folders"):
        ss.analyze_files(path, ss.MetricConfig())  # type: ignore[arg-type]


def test_analyze_files_reads_paths_from_a_generator() -> None:
    tables = ss.analyze_files((p for p in [SAMPLE]), ss.MetricConfig())
    assert len(tables.table) == len(ss.read_timelines(SAMPLE).timelines)


def test_analyze_files_refuses_a_config_that_is_not_a_metric_config() -> None:
    with pytest.raises(TypeError, match=r"^config must be a MetricConfig"):
        ss.analyze_files([SAMPLE], None)  # type: ignore[arg-type]


def test_config_from_upstreams_refuses_one_url_naming_urls() -> None:
    with pytest.raises(TypeError, match=r"^urls must be a list of base URLs"):
        ss.config_from_upstreams("http://127.0.0.1:9/v1")  # type: ignore[arg-type]


def test_config_from_upstreams_takes_a_list_of_one_url() -> None:
    config = ss.config_from_upstreams(["http://127.0.0.1:9/v1"])
    assert [u.base_url for u in config.upstreams] == ["http://127.0.0.1:9/v1"]


# -- several vantage points: the library counts as the CLI does ----------------------------


def _two_views(path: Path) -> list[ss.Timeline]:
    run = ss.read_timelines(SAMPLE).timelines[:10]
    upstream = [t.replace(where=ss.Where.GATEWAY_UPSTREAM) for t in run]
    ss.write_timelines(path, run + upstream)
    return run + upstream


def test_fleet_table_counts_each_stream_once_as_analyze_does(tmp_path: Path) -> None:
    path = tmp_path / "views.jsonl"
    timelines = _two_views(path)
    config = ss.MetricConfig()
    cli = summarise(timelines, config)  # what `steadystream analyze` reports
    tables = ss.analyze_files([path], config)
    library = ss.fleet_metrics(tables.fleet_table(), config)
    assert len(tables.table) == 20  # every row is still there, for the findings
    assert library.streams == cli.fleet.streams == 10
    assert library.to_dict() == cli.fleet.to_dict()
    assert tables.view_note() == cli.notes[0]


def test_fleet_table_of_one_vantage_point_is_the_table(tmp_path: Path) -> None:
    tables = ss.analyze_files([SAMPLE], ss.MetricConfig())
    assert len(tables.fleet_table()) == len(tables.table)
    assert tables.view_note() is None


# -- the package docstring's example runs --------------------------------------------------


def test_the_package_docstring_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ss.__doc__ is not None
    shutil.copy(SAMPLE, tmp_path / "run.jsonl")
    (tmp_path / "runs").mkdir()
    shutil.copy(SAMPLE, tmp_path / "runs" / "a.jsonl")
    monkeypatch.chdir(tmp_path)
    example = ss.__doc__.split("import steadystream as ss\n", 1)[1].split("\n\n", 1)[0]
    # The lines that need no server and no event loop (the load test and servers do).
    lines = [line.strip() for line in example.splitlines()]
    runnable = [
        line
        for line in lines
        if line.startswith(("run =", "ss.")) and not any(w in line for w in ("...", "lab"))
    ]
    assert any("explain" in line for line in runnable)
    scope: dict[str, object] = {"ss": ss}
    for line in runnable:
        exec(line.split("  #", 1)[0], scope)


def test_fleet_metrics_of_a_generator_are_those_of_its_list() -> None:
    from steadystream import fleet_metrics
    from tests.support.timelines import paused_stream, steady_stream

    run = [steady_stream(), paused_stream()]
    assert fleet_metrics(t for t in run) == fleet_metrics(run)
