"""Model names as metric labels: bounded in number and length, one set for every worker."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import orjson

from steadystream.gateway.state import MAX_MODEL_LABEL_CHARS, OTHER_MODEL, ModelLabels


def labelled(labels: ModelLabels, names: list[str]) -> set[str]:
    return {labels.label(name) for name in names}


def test_configured_models_always_and_served_ones_while_there_is_room() -> None:
    labels = ModelLabels(["configured"], 3)
    for name in ("a", "b", "c", "d"):
        labels.served(name)
    assert labelled(labels, ["configured", "a", "b", "c", "d"]) == {
        "configured",
        "a",
        "b",
        OTHER_MODEL,
    }


def test_a_huge_model_name_is_counted_as_other() -> None:
    labels = ModelLabels([], 100)
    huge, longest = "A" * (MAX_MODEL_LABEL_CHARS + 1), "B" * MAX_MODEL_LABEL_CHARS
    labels.served(huge)
    labels.served(longest)
    assert labels.label(huge) == OTHER_MODEL
    assert labels.label(longest) == longest


def test_workers_share_one_bounded_set_across_reloads(tmp_path: Path) -> None:
    shared = tmp_path / "models.json"
    first, second = ModelLabels(["configured"], 3), ModelLabels(["configured"], 3)
    first.share(shared)
    second.share(shared)
    # Each worker sees its own flood of distinct names: together, two served labels at most.
    for i in range(50):
        first.served(f"first-{i}")
        second.served(f"second-{i}")
    names = [f"first-{i}" for i in range(50)] + [f"second-{i}" for i in range(50)]
    together = labelled(first, names) | labelled(second, names)
    assert together == {"first-0", "second-0", OTHER_MODEL}
    # A worker of a reload (or one that replaced a dead worker) takes the same set at once.
    after = ModelLabels(["configured"], 3)
    after.share(shared)
    assert labelled(after, names) == together
    after.served("newcomer")
    assert after.label("newcomer") == OTHER_MODEL
    assert orjson.loads(shared.read_bytes()) == ["first-0", "second-0"]


def test_a_name_another_worker_gave_a_label_gets_it_here_at_its_first_stream(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "models.json"
    first, second = ModelLabels([], 10), ModelLabels([], 10)
    first.share(shared)
    second.share(shared)
    first.served("m")
    assert second.label("m") == OTHER_MODEL  # not told yet
    second.served("m")
    assert second.label("m") == "m"


def test_a_locked_or_damaged_file_costs_a_label_never_a_stream(tmp_path: Path) -> None:
    shared = tmp_path / "models.json"
    labels = ModelLabels([], 10)
    labels.share(shared)
    holder = os.open(shared, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another worker, in the middle of its write
        labels.served("m")
        assert labels.label("m") == OTHER_MODEL
    finally:
        os.close(holder)
    labels.served("m")  # its next stream
    assert labels.label("m") == "m"
    shared.write_bytes(b'{"not": "a list"}\x00\xff')
    labels.served("n")
    assert labels.label("n") == "n"
    assert orjson.loads(shared.read_bytes()) == ["n"]
