"""Fixtures of the gateway tests: an in-memory sink, and both builds of the relay for every test.

The builders (configurations, a client, servers) are in tests/support/gateway.py.
"""

from __future__ import annotations

import pytest

from tests.support.gateway import MemorySink


@pytest.fixture
def sink() -> MemorySink:
    return MemorySink()


@pytest.fixture(autouse=True)
def _on_each_build(build: str) -> str:
    """Every test here runs on both builds of the relay's hot path (tests/conftest.py)."""
    return build
