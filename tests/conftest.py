"""Fixtures for every test package: a local Ray, the relay's two builds, a Chromium.

Builders (timelines, requests, servers) are in tests/support/; fixtures only here.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _quiet_gc_when_serial(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that holds real gaps to a few milliseconds (marked ``serial``) runs with the
    collector as steadystream's own processes run it (``_gc.quiet_gc``): what lives at its
    start is frozen out of the scans. Its servers run in threads of this process, whose heap
    after the rest of the suite is large: one full pass over it stalled a replay server's
    first writes by 280 ms, which no server of ours meets in its own process."""
    if request.node.get_closest_marker("serial") is None:
        yield
        return
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:  # (compared with the state before: the suite's own freeze stays)
            gc.unfreeze()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A local Ray of 2 CPUs for the whole session (starting one takes seconds).

    Code under test finds Ray already initialised and uses it as it is, as it would inside a
    user's own Ray program.
    """
    import ray

    ray.init(
        num_cpus=2,
        _node_ip_address="127.0.0.1",  # loopback only, as every test server here
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
    )
    try:
        yield ray
    finally:
        ray.shutdown()


# -- the relay's two builds (steadystream._build) ----------------------------------------------

_TWINNED = (
    ("StampedConnection", "steadystream.stamped._connection_py"),
    ("EventCutter", "steadystream.gateway._line_py"),
    ("StreamLine", "steadystream.gateway._line_py"),
    ("SseDecoder", "steadystream.protocol._sse_py"),
    ("ChatDialect", "steadystream.protocol._chat_py"),
    ("stamp_events", "steadystream.gateway.resume._tee_py"),
    ("StreamTee", "steadystream.gateway.resume._tee_py"),
)


def _build_names() -> list[str]:
    from steadystream._build import builds
    from steadystream.gateway import _line_py

    return ["python", "compiled"][: len(builds(_line_py))]


@pytest.fixture(params=_build_names())
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on each build of the relay's hot path that is here: its Python source,
    and that source compiled by Cython (where the package was built with a compiler).

    The gateway and the bench client choose their build per stream from
    ``STEADYSTREAM_NATIVE``; the classes a test module names itself are swapped for the
    build's own for the test.
    """
    import importlib

    from steadystream._build import builds, twin

    name: str = request.param
    monkeypatch.setenv("STEADYSTREAM_NATIVE", "1" if name == "compiled" else "0")
    module = request.module
    for attribute, source_name in _TWINNED:
        source = importlib.import_module(source_name)
        named = getattr(module, attribute, None)
        if any(named is getattr(each, attribute) for each in builds(source)):
            chosen = getattr(twin(source), attribute)
            assert (name == "compiled") == (chosen is not getattr(source, attribute))
            monkeypatch.setattr(module, attribute, chosen)
    return name


# -- a Chromium for the report's images and the glass harness --------------------------------

_APT_TIMEOUT_S = 900


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a headless-capable Chromium, installed with apt when missing.

    It installs the Debian package when the tests run as root with apt (as on CI's fresh
    machines); anywhere else it fails and says how to install it. Browser tests are not
    skipped: a report that no browser has opened is not tested.
    """
    from steadystream.report import find_chromium

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
