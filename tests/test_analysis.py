"""Many files, one fleet: per-file tables merged are exactly the table of all streams at once."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import InputError, Timeline
from steadystream.analysis import analyze_files, timeline_files
from steadystream.cli import _register, app
from steadystream.files import write_timelines
from steadystream.metrics import fleet_metrics
from steadystream.metrics import stream_table as table_of
from tests.support.fleets import CONFIG, assert_same_table, random_fleet

_register()
runner = CliRunner()


@pytest.fixture
def fleet_dir(tmp_path: Path) -> tuple[Path, list[Timeline]]:
    """Three runs in a folder tree, in all three formats, plus a file that is no timeline."""
    runs = [random_fleet(40, seed) for seed in (1, 2, 3)]
    (tmp_path / "b").mkdir()
    write_timelines(tmp_path / "a.jsonl", runs[0])
    write_timelines(tmp_path / "b" / "c.parquet", runs[1])
    write_timelines(tmp_path / "b" / "d.jsonl.gz", runs[2])
    (tmp_path / "notes.txt").write_text("not a timeline")
    return tmp_path, [t for run in runs for t in run]


def test_per_file_tables_merge_to_the_table_of_all_streams(
    fleet_dir: tuple[Path, list[Timeline]],
) -> None:
    folder, everything = fleet_dir
    tables = analyze_files([folder], CONFIG)
    assert [Path(f.path).name for f in tables.files] == ["a.jsonl", "c.parquet", "d.jsonl.gz"]
    whole = table_of(everything, CONFIG)
    assert_same_table(tables.table, whole)
    assert fleet_metrics(tables.table, CONFIG) == fleet_metrics(everything, CONFIG)


def test_a_file_named_twice_is_read_once_and_the_library_says_so(
    fleet_dir: tuple[Path, list[Timeline]],
) -> None:
    folder, _ = fleet_dir
    once = analyze_files([folder], CONFIG)
    twice = analyze_files([folder, folder / "a.jsonl"], CONFIG)
    assert len(twice.table) == len(once.table)
    assert once.notes() == []
    assert twice.notes() == ["1 file named twice was read once"]


def test_take_picks_rows_and_their_gaps(fleet_dir: tuple[Path, list[Timeline]]) -> None:
    _, everything = fleet_dir
    picked = [7, 3, 100, 3, 55]
    taken = table_of(everything, CONFIG).take(picked)
    assert_same_table(taken, table_of([everything[i] for i in picked], CONFIG))


def test_folders_expand_in_name_order_and_bad_paths_are_named(tmp_path: Path) -> None:
    (tmp_path / "z.jsonl").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.parquet").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    assert timeline_files([tmp_path]) == [tmp_path / "sub" / "a.parquet", tmp_path / "z.jsonl"]
    with pytest.raises(InputError, match="empty: no timeline files"):
        timeline_files([tmp_path / "empty"])
    with pytest.raises(InputError, match=r"missing\.jsonl: no such file"):
        timeline_files([tmp_path / "missing.jsonl"])


def test_analyze_a_folder_equals_analyze_of_one_merged_file(
    fleet_dir: tuple[Path, list[Timeline]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder, everything = fleet_dir
    merged = tmp_path_factory.mktemp("merged") / "all.jsonl"
    write_timelines(merged, everything)
    args = ["--json", "--by", "tenant", "--stall-threshold", "300ms"]
    split = runner.invoke(app, ["analyze", str(folder), *args])
    whole = runner.invoke(app, ["analyze", str(merged), *args])
    assert split.exit_code == whole.exit_code == 0, split.output + whole.output
    split_data, whole_data = orjson.loads(split.output), orjson.loads(whole.output)
    assert split_data["notes"] == ["3 files, 120 streams merged"]
    for key in ("fleet", "groups", "worst_streams", "findings"):
        assert split_data[key] == whole_data[key], key
    assert set(split_data["groups"]) == {"acme", "globex", "(none)"}


def test_ray_missing_is_one_error_naming_the_extra(
    fleet_dir: tuple[Path, list[Timeline]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as if not installed
    folder, _ = fleet_dir
    with pytest.raises(InputError, match=r"steadystream\[ray\]"):
        analyze_files([folder], CONFIG, ray=True)
    result = runner.invoke(app, ["analyze", str(folder), "--ray"])
    assert result.exit_code == 2
    assert "steadystream[ray]" in result.output
