"""The engine metrics beside a run: what ``analyze``, ``explain`` and ``report`` read with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from steadystream.attribution import EngineSamples
from steadystream.engine_metrics import read_engine_metrics, sidecar_path

__all__ = ["read_engine_beside"]


def read_engine_beside(
    paths: Sequence[Path], explicit: Path | None, notes: list[str]
) -> EngineSamples | None:
    """The engine metrics given, else those ``bench`` scraped beside the first file."""
    path = explicit
    if path is None and paths and sidecar_path(paths[0]).is_file():
        path = sidecar_path(paths[0])
    if path is None:
        return None
    engine = read_engine_metrics(path)
    notes.append(f"engine metrics: {len(engine)} scrapes from {path}")
    return engine
