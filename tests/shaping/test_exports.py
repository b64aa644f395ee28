"""The shaping package's public face: every name in __all__ exists, and nothing else."""

from __future__ import annotations

from steadystream import shaping


def test_all_names_exist_once() -> None:
    assert all(hasattr(shaping, name) for name in shaping.__all__)
    assert len(set(shaping.__all__)) == len(shaping.__all__)


def test_public_names_are_exported() -> None:
    public = {
        name
        for name, value in vars(shaping).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("steadystream")
    }
    assert public <= set(shaping.__all__), public - set(shaping.__all__)
