"""Shared set-up for report tests: the sample run, small runs by hand, and a Chromium.

The Chromium fixture installs the Debian package when it is missing and the tests run as
root with apt (as on CI's fresh machines); anywhere else it fails and says how to install it.
Browser tests are not skipped: a report that no browser has opened is not tested.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from steadystream import Timeline
from steadystream.files import read_timelines
from steadystream.report._browser import find_chromium
from tests.conftest import make_timeline

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUN = ROOT / "examples" / "sample-run.jsonl"
_APT_TIMEOUT_S = 900


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a headless-capable Chromium, installed with apt when missing."""
    found = find_chromium()
    if found is None and _can_apt_install():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            done = subprocess.run(
                command, env=env, capture_output=True, timeout=_APT_TIMEOUT_S, check=False
            )
            if done.returncode != 0:
                tail = done.stderr.decode(errors="replace")[-600:]
                pytest.fail(f"{' '.join(command)} failed ({done.returncode}): {tail}")
        found = find_chromium()
    if found is None:
        pytest.fail(
            "the report tests need Chromium: install it (Debian/Ubuntu: apt-get install"
            " chromium) or set STEADYSTREAM_CHROMIUM to its path"
        )
    return found


def _can_apt_install() -> bool:
    return sys.platform == "linux" and os.geteuid() == 0 and shutil.which("apt-get") is not None


@pytest.fixture(scope="session")
def sample_run() -> list[Timeline]:
    return read_timelines(SAMPLE_RUN).timelines


def steady(stream_id: str, gaps_ms: Sequence[float], *, ttft_ms: float = 100.0) -> Timeline:
    """A stream whose first token comes at ``ttft_ms``, then one token after each gap."""
    times = [ttft_ms]
    for gap in gaps_ms:
        times.append(times[-1] + gap)
    return make_timeline(times, stream_id=stream_id)
