"""free_port: ports for the children we start, from where no connection takes them."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

import steadystream._processes as processes
from steadystream._processes import free_port


def test_a_port_comes_from_below_the_ephemeral_range_and_is_free() -> None:
    start = processes._ephemeral_start()
    ports = {free_port() for _ in range(20)}
    if start - processes._LOWEST >= 1_000:
        assert all(processes._LOWEST <= port < start for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: binds


def test_a_seeded_random_module_does_not_make_two_runs_pick_alike() -> None:
    random.seed(7)
    first = [free_port() for _ in range(8)]
    random.seed(7)
    again = [free_port() for _ in range(8)]
    assert first != again


def test_a_port_taken_by_a_listener_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]

        class OnlyTaken:
            def randrange(self, low: int, high: int) -> int:
                return taken

        monkeypatch.setattr(processes, "_ephemeral_start", lambda: taken + 1_000)
        monkeypatch.setattr(processes, "_LOWEST", taken - 1_000)
        monkeypatch.setattr(processes, "_draw", OnlyTaken())
        # Every draw is the listener's port: refused each time, then the kernel's choice.
        port = free_port()
        assert port != taken


def test_an_unreadable_range_falls_back_to_linux_s_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(processes, "_EPHEMERAL", tmp_path / "missing")
    assert processes._ephemeral_start() == 32_768
    garbled = tmp_path / "range"
    garbled.write_text("not numbers\n", encoding="ascii")
    monkeypatch.setattr(processes, "_EPHEMERAL", garbled)
    assert processes._ephemeral_start() == 32_768
