"""Fixtures of the protocol tests: both builds of the relay for every test (their streams by
hand: tests/support/sse.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _on_each_build(build: str) -> str:
    """Every test here runs on both builds of the relay's hot path (tests/conftest.py)."""
    return build
