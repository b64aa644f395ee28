"""The public face is small and explicit: every name in __all__ exists, and nothing else."""

from __future__ import annotations

import steadystream
from steadystream import metrics


def test_all_names_exist_once() -> None:
    for module in (steadystream, metrics):
        assert all(hasattr(module, name) for name in module.__all__)
    assert len(set(steadystream.__all__)) == len(steadystream.__all__)  # order: ruff RUF022


def test_public_names_are_exported() -> None:
    exported = set(steadystream.__all__)
    public = {
        name
        for name, value in vars(steadystream).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("steadystream")
    }
    assert public <= exported, public - exported
