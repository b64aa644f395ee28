"""Scenarios by name or from YAML: a preset, a file, or a file that starts from a preset.

A file may name a built-in preset (``preset: kv-pressure``) and change a few keys; the
other keys override it section by section. Anything wrong is reported as a
:class:`~steadystream.ConfigError` naming the key and what it accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from steadystream._exceptions import ConfigError
from steadystream._validation import describe_errors
from steadystream._yaml import load_yaml
from steadystream.lab.presets import PRESETS
from steadystream.lab.scenario import Scenario

__all__ = ["load_scenario", "scenario_from_mapping"]


def scenario_from_mapping(data: Mapping[str, Any], *, source: str = "scenario") -> Scenario:
    """Validate a mapping (a parsed YAML file) into a :class:`Scenario`.

    A ``preset`` key names a built-in preset to start from; the other keys override it
    section by section.
    """
    values = dict(data)
    base_name = values.pop("preset", None)
    if base_name is not None:
        if not isinstance(base_name, str) or base_name not in PRESETS:
            raise ConfigError(
                f"{source}: key 'preset': unknown preset {base_name!r} "
                f"(accepted: {', '.join(sorted(PRESETS))})"
            )
        values = _deep_merge(PRESETS[base_name].model_dump(), values)
    try:
        return Scenario.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, source, Scenario, extra_keys=("preset",))) from exc


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A preset by name, or a YAML file by path."""
    if isinstance(name_or_path, str) and name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise ConfigError(
            f"scenario {str(name_or_path)!r} is neither a preset ({', '.join(PRESETS)}) nor a file"
        )
    data = load_yaml(path, "scenario")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a scenario file must hold a mapping of keys")
    data.setdefault("name", path.stem)
    return scenario_from_mapping(data, source=str(path))


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
