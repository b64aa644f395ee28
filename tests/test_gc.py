"""A steadystream process tunes its garbage collector; code in someone else's process does not."""

from __future__ import annotations

import gc
import subprocess
import sys

_PROBE = """
import gc, sys
from steadystream.cli import main
sys.argv = ["steadystream", "--version"]
try:
    main()
except SystemExit:
    pass
print(gc.get_threshold()[0], gc.get_freeze_count() > 0)
"""


def test_the_command_tunes_its_own_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out[-2:] == ["10000", "True"]


def test_importing_the_library_leaves_the_collector_alone() -> None:
    before = gc.get_threshold()
    import steadystream.cli
    import steadystream.gateway.server
    import steadystream.lab.server  # noqa: F401

    assert gc.get_threshold() == before
