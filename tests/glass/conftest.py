"""The glass tests drive the system's Chromium: the report tests' fixture installs it."""

from __future__ import annotations

from tests.report.conftest import chromium

__all__ = ["chromium"]
