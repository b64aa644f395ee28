"""The OpenTelemetry tests' fixture: an in-memory exporter (tests/support/otel.py), shut down
after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.otel import Captured, captured


@pytest.fixture
def otel() -> Iterator[Captured]:
    capture = captured()
    try:
        yield capture
    finally:
        capture.exporter.shutdown()
