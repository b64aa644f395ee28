"""Files from users are read with bounds: YAML (steadystream/_yaml.py), and never a path
that is no regular file (a FIFO, a device)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from steadystream._exceptions import ConfigError
from steadystream._yaml import load_yaml
from steadystream.gateway.config import load_config

LAUGHS = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(8)]
)


def test_anchors_shared_a_few_times_are_read(tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text("base: &base {timeout: 5}\none: *base\ntwo: *base\n")
    assert load_yaml(path, "file") == {
        "base": {"timeout": 5},
        "one": {"timeout": 5},
        "two": {"timeout": 5},
    }


def test_a_key_given_twice_is_refused_naming_both_lines_but_a_merge_may_be_overridden(
    tmp_path: Path,
) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("server:\n  port: 8081\n  host: 0.0.0.0\n  port: 8082\n")
    with pytest.raises(ConfigError, match=r"line 4: key 'port' is given twice \(first at line 2\)"):
        load_config(path)
    path.write_text("a: {x: 1, x: 2}\n")  # (in a flow mapping too, on one line)
    with pytest.raises(ConfigError, match="key 'x' is given twice"):
        load_yaml(path, "file")
    path.write_text("base: &base {x: 1, y: 2}\nmine:\n  <<: *base\n  x: 3\n1: a\n'1': b\n")
    assert load_yaml(path, "file") == {
        "base": {"x": 1, "y": 2},
        "mine": {"x": 3, "y": 2},  # the merge's x, overridden as YAML's merge says
        1: "a",
        "1": "b",  # (a number and a string are two keys)
    }


def test_a_billion_laughs_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS)
    assert len(LAUGHS) < 600
    with pytest.raises(ConfigError, match="more than 100000 values"):
        load_config(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a: &x\n  - *x\n", "refers to itself"),
        (b"a: \xff\xfe\n", "not UTF-8 text \\(byte 3\\)"),
        (b"[" * 50_000, "nested too deep"),
        (b"a: [1\n", "cannot read the gateway configuration"),
    ],
    ids=["self", "utf8", "deep", "syntax"],
)
def test_bad_files_are_refused_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as refused:
        load_config(path)
    assert str(path) in str(refused.value)
    assert len(str(refused.value)) < 1000


def test_a_path_that_cannot_be_looked_up_is_refused_naming_it(tmp_path: Path) -> None:
    # Path.exists() raised for a name too long (and a folder it may not enter): a traceback
    # from every command that reads a YAML file.
    path = tmp_path / ("x" * 300) / "g.yaml"
    with pytest.raises(ConfigError, match="cannot read the scenario: File name too long"):
        load_yaml(path, "scenario")
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(ConfigError, match="cannot read the scenario"):
        load_yaml(loop, "scenario")


def test_a_fifo_or_a_device_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)  # (nobody writes it: a read would wait forever)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config("/dev/zero")


def test_a_file_past_the_size_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(path)


def test_a_timeline_or_engine_metrics_path_that_is_no_file_is_refused(tmp_path: Path) -> None:
    # whatif, gate, report and replay read through read_timelines; a FIFO hung them all and
    # /dev/zero grew their memory until the machine had none.
    from steadystream._exceptions import InputError
    from steadystream.engine_metrics import read_engine_metrics
    from steadystream.files import read_timelines

    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(InputError, match="not a regular file"):
            read_timelines(path)
        with pytest.raises(InputError, match="not a regular file"):
            read_engine_metrics(path)


def test_a_timeline_file_of_bytes_with_no_line_end_is_refused(tmp_path: Path) -> None:
    # A cut-off last line is a crashed recorder's (its streams before it are kept); a file
    # that is nothing but a cut-off line is no run at all.
    from steadystream._exceptions import TimelineFormatError
    from steadystream.files import read_timelines

    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\x00" * 1000)
    with pytest.raises(TimelineFormatError, match="no complete line"):
        read_timelines(path)


def test_a_line_past_the_bound_is_refused_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steadystream._exceptions import TimelineFormatError
    from steadystream.files import _jsonl, read_timelines

    monkeypatch.setattr(_jsonl, "MAX_LINE_BYTES", 1 << 20)  # (the real bound is 256 MiB)
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"{" + b" " * (3 << 20))
    with pytest.raises(TimelineFormatError, match="longer than 1 MiB") as refused:
        read_timelines(path)
    assert refused.value.line == 1
