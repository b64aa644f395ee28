"""Which stamps a stream gets, and what is said when kernel stamps are asked for and absent."""

from __future__ import annotations

import pytest

from steadystream._exceptions import SpecError
from steadystream.stamped import StampMode, kernel_stamps_available, modes, resolve_stamps
from steadystream.stamped.kernel import WallToClock


def test_auto_falls_back_to_user_stamps_where_the_kernel_gives_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(modes, "kernel_stamps_available", lambda: False)
    assert resolve_stamps("auto") is StampMode.USER
    assert resolve_stamps("user") is StampMode.USER
    with pytest.raises(SpecError, match="no kernel receive stamps"):
        resolve_stamps("kernel")
    monkeypatch.setattr(modes, "kernel_stamps_available", lambda: True)
    assert resolve_stamps("auto") is StampMode.KERNEL
    assert resolve_stamps("user") is StampMode.USER


def test_an_unknown_mode_names_the_choices() -> None:
    with pytest.raises(SpecError, match="'often' is not one of auto, kernel, user"):
        resolve_stamps("often")


def test_this_linux_gives_kernel_stamps() -> None:
    # The project's machines are Linux; a sandbox without stamps would fail here, loudly,
    # rather than measure with user stamps unnoticed.
    assert kernel_stamps_available()


def test_a_wall_clock_step_is_seen() -> None:
    now = [1_000]
    wall = WallToClock(lambda: now[0])
    assert abs(wall.step_ns()) < 1_000_000  # no step: the offset holds
    stamp = wall.to_clock(5_000_000_000)
    assert stamp == 5_000_000_000 + wall.offset_ns
    now[0] += 10_000_000_000  # the monotonic clock ran 10 s further than the wall clock did
    assert wall.step_ns() < -9_000_000_000
