"""Model names as metric labels: bounded in number and length, one set for every worker."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import orjson
import pytest

from steadystream.gateway.model_labels import (
    MAX_MODEL_LABEL_CHARS,
    OTHER_MODEL,
    ModelLabels,
    start_shared_models,
)


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
    shared = start_shared_models(tmp_path / "models.json")
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
    shared = start_shared_models(tmp_path / "models.json")
    first, second = ModelLabels([], 10), ModelLabels([], 10)
    first.share(shared)
    second.share(shared)
    first.served("m")
    assert second.label("m") == OTHER_MODEL  # not told yet
    second.served("m")
    assert second.label("m") == "m"


def test_a_locked_file_costs_a_label_for_one_stream(tmp_path: Path) -> None:
    shared = start_shared_models(tmp_path / "models.json")
    labels = ModelLabels([], 10)
    labels.share(shared)
    holder = os.open(tmp_path / "models.json.lock", os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another worker, in the middle of its write
        labels.served("m")
        assert labels.label("m") == OTHER_MODEL
    finally:
        os.close(holder)
    labels.served("m")  # its next stream
    assert labels.label("m") == "m"


def test_the_shared_set_never_shrinks_nor_restarts(tmp_path: Path) -> None:
    shared = start_shared_models(tmp_path / "models.json")
    first, second = ModelLabels([], 3), ModelLabels([], 3)
    first.share(shared)
    second.share(shared)
    first.served("a")
    second.served("b")
    # Replaced by fewer names: the next worker to join writes back what it labels.
    shared.write_bytes(b'["b"]')
    first.served("c")
    assert orjson.loads(shared.read_bytes()) == ["b", "a", "c"]
    assert {first.label(n) for n in "abcd"} == {"a", "b", "c", OTHER_MODEL}
    # Damaged or gone: nobody can tell what others labelled, so no new name gets a label
    # (and nothing is written over it), whatever a worker that starts now knows.
    for damage in (b'{"not": "a list"}\x00\xff', b"[" + b'"x",' * 100_000 + b'"x"]', None):
        if damage is None:
            shared.unlink()
        else:
            shared.write_bytes(damage)
        after_reload = ModelLabels([], 3)
        after_reload.share(shared)
        after_reload.served("z")
        assert after_reload.label("z") == OTHER_MODEL
        assert (shared.read_bytes() if shared.exists() else None) == damage


def test_the_file_is_replaced_whole_never_written_in_place(tmp_path: Path) -> None:
    shared = start_shared_models(tmp_path / "models.json")
    before = shared.stat().st_ino
    labels = ModelLabels([], 3)
    labels.share(shared)
    labels.served("a")
    assert shared.stat().st_ino != before  # a new file: a reader never sees half of one
    assert orjson.loads(shared.read_bytes()) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.json", "models.json.lock"]


def test_names_of_many_bytes_are_read_back_by_every_worker(tmp_path: Path) -> None:
    shared = start_shared_models(tmp_path / "models.json")
    names = ["模" * 100, "型" * 100]  # 3 bytes a character, well past 256 bytes a name
    first, second = ModelLabels([], 2), ModelLabels([], 2)
    first.share(shared)
    second.share(shared)
    first.served(names[0])
    second.served(names[1])
    second.served(names[0])
    later = ModelLabels([], 2)
    later.share(shared)
    assert first.label(names[0]) == names[0]
    for labels in (second, later):
        assert [labels.label(name) for name in names] == names


def test_a_name_gets_its_label_only_once_the_file_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steadystream.gateway.model_labels as model_labels

    shared = start_shared_models(tmp_path / "models.json")
    labels = ModelLabels([], 3)
    labels.share(shared)

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_labels, "write_whole", full_disk)
    labels.served("m")
    assert labels.label("m") == OTHER_MODEL  # else this worker would hold one over the bound
    monkeypatch.undo()
    labels.served("m")
    assert labels.label("m") == "m"
    assert orjson.loads(shared.read_bytes()) == ["m"]


def test_no_room_for_served_models_writes_nothing(tmp_path: Path) -> None:
    shared = start_shared_models(tmp_path / "models.json")
    labels = ModelLabels(["configured"], 1)
    labels.share(shared)
    labels.served("x")
    assert labels.label("x") == OTHER_MODEL
    assert orjson.loads(shared.read_bytes()) == []
