"""Scenarios: presets, YAML files, and errors that name the key and what it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from steadystream import ConfigError
from steadystream.lab import PRESETS, Scenario, load_scenario, preset_lines, scenario_from_mapping

PROMISED = {
    "steady",
    "prefill-interference",
    "kv-pressure",
    "spec-decode",
    "single-token-chunks",
    "head-burst",
    "flaky-network",
    "mixed",
}


def test_every_promised_preset_exists_with_one_line_each() -> None:
    assert set(PRESETS) == PROMISED
    lines = preset_lines()
    assert len(lines) == len(PROMISED)
    for name, line in zip(PRESETS, lines, strict=True):
        assert line.startswith(name)
        assert "\n" not in line
        assert len(line.split(None, 1)[1]) > 20


def test_load_by_name_and_by_yaml_file_extending_a_preset(tmp_path: Path) -> None:
    assert load_scenario("kv-pressure") is PRESETS["kv-pressure"]
    path = tmp_path / "tight.yaml"
    path.write_text(
        "preset: kv-pressure\n"
        "description: tighter\n"
        "kv_cache:\n  total_blocks: 128\n"
        "network:\n  jitter_ms: 3\n",
        encoding="utf-8",
    )
    loaded = load_scenario(path)
    assert loaded.name == "tight"
    assert loaded.kv_cache.total_blocks == 128
    assert loaded.kv_cache.block_tokens == PRESETS["kv-pressure"].kv_cache.block_tokens
    assert loaded.background == PRESETS["kv-pressure"].background
    assert loaded.network.jitter_ms == 3


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert load_scenario(path).scheduler == Scenario().scheduler


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"scheduler": {"step_base_ms": -1}}, "'scheduler.step_base_ms'"),
        ({"kv_cache": {"blocks": 3}}, "accepted: block_tokens, total_blocks"),
        ({"networks": {}}, "'networks': unknown key"),
        (
            {"spec_decode": {"drift_start": 0.8, "drift_end": 0.2}},
            "drift_end must be >= drift_start",
        ),
        ({"preset": "nope"}, "accepted: flaky-network, head-burst"),
        ({"faults": {"error_after": 3, "reset_after": 4}}, "cannot be combined"),
        ({"emission": {"tokens_per_event": "many"}}, "'emission.tokens_per_event'"),
    ],
)
def test_errors_name_the_key(data: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError, match="test-source") as raised:
        scenario_from_mapping(data, source="test-source")
    assert expected in str(raised.value)


def test_unreadable_files_and_unknown_names_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="neither a preset"):
        load_scenario("no-such-preset")
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler: [1, 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping"):
        load_scenario(listed)


def test_docs_list_every_parameter_and_preset() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "lab.md").read_text(encoding="utf-8")
    scenario = Scenario()
    for section, model in scenario:
        if isinstance(model, BaseModel):
            for key in type(model).model_fields:
                assert f"`{key}`" in docs or f"`{section}.{key}`" in docs, (section, key)
    for name in PRESETS:
        assert f"`{name}`" in docs
