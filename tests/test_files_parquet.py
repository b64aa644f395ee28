"""Parquet timeline files: files made by hand, row checks, and a missing pyarrow."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import steadystream.files
from steadystream import SCHEMA, InputError, Outcome, TimelineFormatError
from steadystream.files import read_parquet, write_parquet
from tests.support.files import STREAMS, bare_stream, corrupt_parquet

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


def test_parquet_written_by_hand_loads_with_defaults_and_casts(tmp_path: Path) -> None:
    path = tmp_path / "hand.parquet"
    table = pa.table(
        {
            "id": ["h1"],
            "where": ["client"],
            "times": [[1, 2]],
            "tokens": [[1, 1]],
            "wire_bytes": [[0, 0]],
            "text_bytes": [[2, 2]],
            "kinds": ["cc"],
            "extra": [9],
        },
        metadata={b"steadystream.schema": SCHEMA.encode()},
    )
    pq.write_table(table, path)
    (stream,) = read_parquet(path)
    assert stream.tokens.dtype == np.int32
    assert (stream.stream_id, stream.outcome, stream.times.tolist()) == (
        "h1",
        Outcome.COMPLETE,
        [1, 2],
    )


def test_parquet_rows_are_checked_like_lines(tmp_path: Path) -> None:
    path = tmp_path / "run.parquet"
    write_parquet(path, [bare_stream("a"), bare_stream("b")])
    table = pq.read_table(path)
    times = pa.array([[0, 50, 70], [9, 3, 10]], pa.list_(pa.int64()))
    edited = table.set_column(table.schema.get_field_index("times"), "times", times)
    pq.write_table(edited.replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(TimelineFormatError, match="times must not decrease") as caught:
        read_parquet(path)
    assert (caught.value.line, caught.value.field) == (2, "times")


def test_parquet_needs_its_schema_name(tmp_path: Path) -> None:
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"id": ["x"]}), path)
    with pytest.raises(TimelineFormatError, match=r"no steadystream\.schema"):
        read_parquet(path)
    not_parquet = tmp_path / "text.parquet"
    not_parquet.write_text("hello")
    with pytest.raises(TimelineFormatError, match="not a Parquet file"):
        read_parquet(not_parquet)


def test_parquet_without_pyarrow_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.delitem(sys.modules, "steadystream.files._parquet", raising=False)
    monkeypatch.delattr(steadystream.files, "_parquet", raising=False)
    with pytest.raises(InputError, match=r"pip install steadystream\[parquet\]"):
        write_parquet(tmp_path / "run.parquet", STREAMS)


def test_parquet_with_no_stream(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    assert write_parquet(path, []) == 0
    assert read_parquet(path) == []
    assert pq.read_schema(path).metadata[b"steadystream.schema"] == SCHEMA.encode()


def test_parquet_with_a_damaged_page_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "damaged.parquet"
    corrupt_parquet(path)
    with pytest.raises(TimelineFormatError, match="damaged Parquet data") as caught:
        read_parquet(path)
    assert caught.value.path == str(path)
    assert str(caught.value).isprintable()  # one line, without the damaged bytes
