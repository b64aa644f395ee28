"""Fixtures of the bench tests: labs on loopback, in a thread or in a process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from steadystream.lab import LabServer
from tests.support.bench import LabProcess, lab_in_a_process


@pytest.fixture
def lab() -> Iterator[LabServer]:
    with LabServer("steady") as server:
        yield server


@pytest.fixture(scope="module")
def lab_process() -> Iterator[LabProcess]:
    with lab_in_a_process("steady") as lab:
        yield lab
