"""Fixtures of the report tests: the sample run (the Chromium is tests/conftest.py's)."""

from __future__ import annotations

import pytest

from steadystream import Timeline
from steadystream.files import read_timelines
from tests.support.report import SAMPLE_RUN


@pytest.fixture(scope="session")
def sample_run() -> list[Timeline]:
    return read_timelines(SAMPLE_RUN).timelines
