"""Joining Ray and reading files in its tasks: what goes wrong is one clear error, at once.

None of these starts Ray: an address where nothing answers is refused before ``ray.init``, and
the Ray Client's missing package is found by ``ray.init`` before it connects anywhere. The
tasks' functions are called in this process.
"""

from __future__ import annotations

import importlib.util
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steadystream import InputError, SteadystreamError
from steadystream._processes import free_port
from steadystream._ray import connected
from steadystream.analysis import _file_table_or_error
from steadystream.cli import _register, app
from steadystream.explanations import _read_file
from steadystream.files import write_timelines
from steadystream.metrics import MetricConfig
from tests.support.fleets import random_fleet

ray = pytest.importorskip("ray")

_register()
runner = CliRunner()


@pytest.fixture
def not_in_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if this process had no Ray session (another test's may still be open)."""
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_an_address_where_nothing_answers_is_refused_at_once(not_in_ray: None) -> None:
    address = f"127.0.0.1:{free_port()}"  # closed again once found: nothing listens there
    started = time.monotonic()
    refused = re.escape(f"Ray cluster at {address}: nothing answers")
    with pytest.raises(InputError, match=refused), connected(address):
        pass
    assert time.monotonic() - started < 10  # Ray itself would retry for many minutes


def test_ray_address_from_the_environment_is_checked_too(
    not_in_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = f"ray://127.0.0.1:{free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    refused = re.escape(f"Ray cluster at {address}: nothing answers")
    with pytest.raises(InputError, match=refused), connected():
        pass


@pytest.mark.skipif(
    importlib.util.find_spec("grpc") is not None, reason="the Ray Client is installed"
)
def test_a_ray_client_address_without_the_client_says_how_to_install(
    not_in_ray: None, tmp_path: Path
) -> None:
    write_timelines(tmp_path / "a.jsonl", random_fleet(3, 1))
    with socket.create_server(("127.0.0.1", 0)) as listening:  # answers, as a head would
        address = f"ray://127.0.0.1:{listening.getsockname()[1]}"
        result = runner.invoke(app, ["explain", str(tmp_path), "--ray-address", address])
    assert result.exit_code == 2, result.output
    assert "pip install 'ray[client]'" in result.output
    assert "Traceback" not in result.output


def test_an_unexpected_error_in_a_file_task_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.jsonl"
    write_timelines(path, random_fleet(3, 1))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr("steadystream.analysis.file_table", broken)
    monkeypatch.setattr("steadystream.explanations.load_run", broken)
    table = _file_table_or_error(path, MetricConfig())
    head, views, clocks = _read_file(path, MetricConfig())
    for error in (table, head):
        assert isinstance(error, SteadystreamError)
        assert str(error) == f"{path}: failed unexpectedly (RuntimeError: boom second line)"
    assert views is None
    assert clocks is None
