"""Fixtures of the attribution tests: a recorded run (its streams: tests/support/attribution.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadystream.files import write_jsonl
from tests.support.attribution import GAP, cadence, stream


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A recorded run: stream ``a`` with the one 600 ms gap, stream ``b`` steady."""
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [stream(GAP, stream_id="a"), stream(cadence(30, 20), stream_id="b")])
    return path
