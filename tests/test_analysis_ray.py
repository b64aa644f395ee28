"""`analyze` on Ray: a task per file on a local 2-CPU Ray, exactly the single-process result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import TimelineFormatError
from steadystream.analysis import analyze_files
from steadystream.cli import _register, app
from steadystream.files import write_timelines
from tests.support.files import corrupt_parquet
from tests.support.fleets import CONFIG, assert_same_table, random_fleet

_register()
runner = CliRunner()


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    for seed, name in ((4, "a.jsonl"), (5, "b.parquet"), (6, "c.jsonl.gz")):
        write_timelines(tmp_path / name, random_fleet(30, seed))
    return tmp_path


def test_ray_tasks_give_exactly_the_single_process_table(fleet_dir: Path, ray_local: Any) -> None:
    on_ray = analyze_files([fleet_dir], CONFIG, ray=True)
    here = analyze_files([fleet_dir], CONFIG)
    assert [f.path for f in on_ray.files] == [f.path for f in here.files]
    assert_same_table(on_ray.table, here.table)


def bad_jsonl(path: Path) -> None:
    path.write_bytes(b'{"schema": "steadystream.timeline/1"}\n')


@pytest.mark.parametrize(
    ("name", "spoil", "named"),
    [
        ("d.jsonl", bad_jsonl, "d.jsonl:1"),
        ("d.parquet", corrupt_parquet, "d.parquet: damaged Parquet data"),
    ],
)
def test_a_bad_file_on_ray_is_the_same_clear_error(
    fleet_dir: Path, ray_local: Any, name: str, spoil: Callable[[Path], None], named: str
) -> None:
    spoil(fleet_dir / name)
    with pytest.raises(TimelineFormatError) as here:
        analyze_files([fleet_dir], CONFIG)
    with pytest.raises(TimelineFormatError) as on_ray:
        analyze_files([fleet_dir], CONFIG, ray=True)
    assert str(on_ray.value) == str(here.value)
    assert named in str(on_ray.value)
    result = runner.invoke(app, ["analyze", str(fleet_dir), "--ray"])
    assert result.exit_code == 2
    assert named in " ".join(result.output.split())


def test_cli_ray_prints_the_same_summary(fleet_dir: Path, ray_local: Any) -> None:
    args = ["analyze", str(fleet_dir), "--json", "--by", "tenant"]
    on_ray, here = runner.invoke(app, [*args, "--ray"]), runner.invoke(app, args)
    assert on_ray.exit_code == here.exit_code == 0, on_ray.output + here.output
    ray_data, here_data = orjson.loads(on_ray.output), orjson.loads(here.output)
    for key in ("fleet", "groups", "worst_streams", "findings", "stall_causes", "notes"):
        assert ray_data[key] == here_data[key], key
    assert here_data["stall_causes"]  # the stalls' causes, attributed on Ray too


@pytest.mark.parametrize("command", ["analyze", "explain"])
def test_a_gateway_recording_on_ray_counts_each_request_once(
    tmp_path: Path, ray_local: Any, command: str
) -> None:
    from tests.support.attribution import gateway_folder

    args = [command, str(gateway_folder(tmp_path)), "--json"]
    on_ray, here = runner.invoke(app, [*args, "--ray"]), runner.invoke(app, args)
    assert on_ray.exit_code == here.exit_code == 0, on_ray.output + here.output
    ray_data, here_data = orjson.loads(on_ray.output), orjson.loads(here.output)
    assert ray_data == here_data
    assert (ray_data["fleet"]["streams"] if command == "analyze" else ray_data["streams"]) == 4
