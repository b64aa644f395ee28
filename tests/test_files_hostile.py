"""Recorded runs made by a hostile hand: every one is a clear error naming the file, the line
(or row) and the field, or is read with its output bounded; never a traceback or a wrong number.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from steadystream import SCHEMA, InputError, Timeline, TimelineFormatError
from steadystream.cli import _register, app
from steadystream.cli.analyze import MAX_BY_GROUPS
from steadystream.files import read_jsonl, read_timelines, write_jsonl
from steadystream.metrics import fleet_metrics, stream_table
from steadystream.metrics._fleet import MAX_TTFT_GROUPS
from tests.support.timelines import make_timeline

_register()
runner = CliRunner()

_BASE: dict[str, Any] = {
    "schema": SCHEMA,
    "id": "a",
    "where": "client",
    "times": [1000, 2000, 3000],
    "tokens": [1, 1, 1],
    "wire_bytes": [1, 1, 1],
    "text_bytes": [1, 1, 1],
    "kinds": "ccc",
}
_LATEST = 2**63 - 1


def _line(**patch: Any) -> bytes:
    return orjson.dumps({**_BASE, **patch}) + b"\n"


def _analyze(*args: str) -> Any:
    return runner.invoke(app, ["analyze", *args])


def _one_line_error(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return str(lines[0])


# -- times whose gap does not fit in 64 bits --------------------------------------------------


def test_a_gap_that_would_wrap_past_64_bits_is_refused_not_read_as_negative(
    tmp_path: Path,
) -> None:
    # -1 ms (the clock skew a reader takes) to 2**63 - 1: a gap of 2**63 - 1 + 10**6 ns, which
    # int64 wraps to about -292 years, so the stream read as one with no freeze at all.
    path = tmp_path / "wrap.jsonl"
    path.write_bytes(_line(id="ok") + _line(times=[-1_000_000, 0, _LATEST]))
    with pytest.raises(TimelineFormatError) as caught:
        read_jsonl(path)
    assert (caught.value.line, caught.value.field) == (2, "times")
    assert "event 2" in str(caught.value)
    message = _one_line_error(_analyze(str(path)))
    assert "wrap.jsonl:2:" in message
    assert "(field 'times')" in message


def test_the_latest_time_a_reader_takes_still_gives_a_positive_gap(tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    latest = 2**63 - 1_000_001
    path.write_bytes(
        _line(
            times=[-1_000_000, latest],
            tokens=[1, 1],
            wire_bytes=[1, 1],
            text_bytes=[1, 1],
            kinds="cc",
        )
    )
    (stream,) = read_jsonl(path).timelines
    assert stream_table([stream]).column("max_gap_s")[0] == pytest.approx(2**63 / 1e9)


def test_a_writer_refuses_a_time_a_reader_would_refuse(tmp_path: Path) -> None:
    stream = make_timeline([10, 20], stream_id="late", role_ms=None).replace(
        times=np.array([10, _LATEST], np.int64)
    )
    path = tmp_path / "late.jsonl"
    with pytest.raises(InputError, match=r"stream 'late' cannot be written: times must be below"):
        write_jsonl(path, [stream])
    assert not path.exists()


# -- a label with a value per stream ----------------------------------------------------------


def _labelled(count: int, label: str = "tenant") -> list[Timeline]:
    streams = []
    for i in range(count):
        stream = make_timeline([100 + i, 120 + i], stream_id=f"s{i}")
        stream.labels[label] = f"t{i:05d}"
        streams.append(stream)
    return streams


def test_ttft_by_keeps_the_most_used_values_and_pools_the_rest() -> None:
    streams = _labelled(MAX_TTFT_GROUPS + 50)
    for stream in streams[:3]:
        stream.labels["tenant"] = "busy"  # MAX + 48 values: busy, and 99 more are kept
    by_tenant = fleet_metrics(streams).ttft_by["tenant"]
    assert len(by_tenant) == MAX_TTFT_GROUPS + 1
    assert by_tenant["busy"].streams == 3
    rest = by_tenant["(48 other values)"]
    assert rest.streams == 48
    assert sum(group.streams for group in by_tenant.values()) == len(streams)
    assert rest.p50_s is not None
    assert rest.p50_s > by_tenant["busy"].p50_s


def test_ttft_by_below_the_bound_is_every_value_in_name_order() -> None:
    by_tenant = fleet_metrics(_labelled(5)).ttft_by["tenant"]
    assert list(by_tenant) == [f"t{i:05d}" for i in range(5)]
    assert by_tenant["t00003"].p50_s == pytest.approx(0.103)


def test_analyze_by_a_label_with_a_value_per_stream_is_one_line_refusal(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    write_jsonl(path, _labelled(MAX_BY_GROUPS + 1))
    message = _one_line_error(_analyze(str(path), "--by", "tenant"))
    assert f"--by tenant: the streams hold {MAX_BY_GROUPS + 1} values of tenant" in message
    # Without --by the same run is read, its ttft_by bounded.
    result = _analyze(str(path), "--json")
    assert result.exit_code == 0, result.output
    assert len(orjson.loads(result.output)["fleet"]["ttft_by"]["tenant"]) == MAX_TTFT_GROUPS + 1


def test_analyze_by_a_label_at_the_bound_gives_every_group(tmp_path: Path) -> None:
    path = tmp_path / "some.jsonl"
    write_jsonl(path, _labelled(MAX_BY_GROUPS))
    result = _analyze(str(path), "--by", "tenant", "--json", "--no-explain")
    assert result.exit_code == 0, result.output
    assert len(orjson.loads(result.output)["groups"]) == MAX_BY_GROUPS


# -- Parquet ------------------------------------------------------------------------------------


def _parquet(path: Path, **columns: Any) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    base: dict[str, Any] = {
        "id": pa.array(["p"]),
        "where": pa.array(["client"]),
        "times": pa.array([[1000, 2000]]),
        "tokens": pa.array([[1, 1]], pa.list_(pa.int32())),
        "wire_bytes": pa.array([[1, 1]], pa.list_(pa.int32())),
        "text_bytes": pa.array([[1, 1]], pa.list_(pa.int32())),
        "kinds": pa.array(["cc"]),
    }
    base.update(columns)
    pq.write_table(pa.table(base, metadata={b"steadystream.schema": SCHEMA.encode()}), path)
    return path


@pytest.mark.parametrize(
    ("column", "values", "type_name"),
    [
        ("times", [["1000", "2000"]], "list<element: string>"),  # Arrow would parse them
        ("times", [[1000.0, 2000.0]], "list<element: double>"),  # and cast 1000.0 to 1000
        ("tokens", [[True, True]], "list<element: bool>"),
        ("kinds", [7], "int64"),  # (read as the one letter "7": "kinds has 1 letters")
        ("error", [5], "int64"),  # (read as the text "5")
        ("started_at", ["1763729000"], "string"),
    ],
)
def test_parquet_values_of_another_kind_are_refused_not_converted(
    tmp_path: Path, column: str, values: list[Any], type_name: str
) -> None:
    pa = pytest.importorskip("pyarrow")
    path = _parquet(tmp_path / "kind.parquet", **{column: pa.array(values)})
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(path)
    assert caught.value.field == column
    assert f"column {column} has type {type_name}" in str(caught.value)


def test_parquet_columns_of_the_same_kind_still_cast(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    path = _parquet(
        tmp_path / "cast.parquet",
        times=pa.array([[1000, 2000]], pa.large_list(pa.int32())),
        tokens=pa.array([[1, 1]], pa.list_(pa.uint8())),
        kinds=pa.array(["cc"]).dictionary_encode(),
        started_at=pa.array([1763729000], pa.int64()),
        error=pa.array([None], pa.null()),
    )
    (stream,) = read_timelines(path).timelines
    assert (stream.times.tolist(), stream.tokens.tolist(), stream.started_at) == (
        [1000, 2000],
        [1, 1],
        1763729000.0,
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1e20, -1e12])
def test_parquet_started_at_that_is_no_finite_number_is_refused(
    tmp_path: Path, value: float
) -> None:
    pa = pytest.importorskip("pyarrow")
    path = _parquet(tmp_path / "nan.parquet", started_at=pa.array([value]))
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(path)
    assert (caught.value.line, caught.value.field) == (1, "started_at")


def test_parquet_times_that_would_wrap_a_gap_are_refused_at_their_row(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    times = pa.array([[1000, 2000], [-1_000_000, _LATEST]])
    two = {
        name: pa.array([[1, 1]] * 2, pa.list_(pa.int32()))
        for name in ("tokens", "wire_bytes", "text_bytes")
    }
    path = _parquet(
        tmp_path / "wrap.parquet",
        id=pa.array(["p", "q"]),
        where=pa.array(["client"] * 2),
        kinds=pa.array(["cc"] * 2),
        times=times,
        **two,
    )
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(path)
    assert (caught.value.line, caught.value.field) == (2, "times")


def test_parquet_row_group_of_more_events_than_a_reader_takes_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A few kilobytes can encode a billion equal times (gigabytes once read): the footer's
    # count is checked first. The bound is lowered here, as the real one is 32 M events.
    pa = pytest.importorskip("pyarrow")
    from steadystream.files import _parquet as parquet_module

    monkeypatch.setattr(parquet_module, "MAX_GROUP_EVENTS", 1000)
    n = 1001
    many = {
        name: pa.array([[1] * n], pa.list_(pa.int32()))
        for name in ("tokens", "wire_bytes", "text_bytes")
    }
    path = _parquet(
        tmp_path / "bomb.parquet", times=pa.array([[0] * n]), kinds=pa.array(["c" * n]), **many
    )
    with pytest.raises(TimelineFormatError, match="row group 0 holds 1,001 events") as caught:
        read_timelines(path)
    assert caught.value.field == "times"
    monkeypatch.setattr(parquet_module, "MAX_GROUP_EVENTS", n)
    assert len(read_timelines(path).timelines[0]) == n


# -- paths ------------------------------------------------------------------------------------


def test_a_link_loop_is_named_as_one_not_as_a_missing_file(tmp_path: Path) -> None:
    os.symlink(tmp_path / "b.jsonl", tmp_path / "a.jsonl")
    os.symlink(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    message = _one_line_error(_analyze(str(tmp_path / "a.jsonl")))
    assert "a.jsonl: a link to nothing" in message


# -- lines that were always refused, pinned through the command -------------------------------


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (_line(times=["1000", "2000", "3000"]), "times"),
        (_line(kinds="cxc"), "kinds"),
        (_line(tokens=[1, -1, 1]), "tokens"),
        (_line(tokens=[1, True, 1]), "tokens"),
        (_line(tokens=[1, 1.0, 1]), "tokens"),
        (_line(tokens=[1, 2**40, 1]), "tokens"),
        (_line(texts=[1, 2, 3]), "texts"),
        (_line(meta=[1, 2]), "meta"),
        (_line(times=[3000, 2000, 1000]), "times"),
        (_line(usage={"completion_tokens": -1}), "usage"),
        (json.dumps({**_BASE, "started_at": 1.5}).replace("1.5", "NaN").encode() + b"\n", None),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_hostile_line_is_one_line_naming_file_line_and_field(
    tmp_path: Path, line: bytes, field: str | None
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(_line(id="fine") + line.replace(b"\n", b"\r\n"))  # (CRLF ends are read)
    message = _one_line_error(_analyze(str(path)))
    assert message.startswith(f"error: {path.name}:2: ") or f"{path}:2: " in message
    if field is not None:
        assert message.endswith(f"(field '{field}')")


def test_a_byte_order_mark_is_refused_at_line_one(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _line() + _line(id="b"))
    message = _one_line_error(_analyze(str(path)))
    assert "bom.jsonl:1:" in message
    assert "byte order mark" in message


@pytest.mark.parametrize("value", [1e20, 253_402_300_800, -1e300])
def test_a_started_at_outside_the_calendar_is_refused_by_the_reader(
    tmp_path: Path, value: float
) -> None:
    # report crashed on it (OverflowError, "year is out of range"); analyze took it.
    path = tmp_path / "far.jsonl"
    path.write_text(json.dumps({**_BASE, "started_at": value}) + "\n")
    with pytest.raises(TimelineFormatError, match="within the calendar") as caught:
        read_jsonl(path)
    assert caught.value.field == "started_at"
    path.write_text(json.dumps({**_BASE, "started_at": 253_402_300_799.5}) + "\n")
    assert read_jsonl(path).timelines[0].started_at == 253_402_300_799.5


def test_a_usage_count_a_writer_refuses_is_not_read_either(tmp_path: Path) -> None:
    # The reader took counts up to 2**64 - 1, which no writer could write back.
    path = tmp_path / "usage.jsonl"
    path.write_text(json.dumps({**_BASE, "usage": {"completion_tokens": 2**63}}) + "\n")
    with pytest.raises(TimelineFormatError, match=r"integers from 0 to 2\*\*63 - 1"):
        read_jsonl(path)
    path.write_text(json.dumps({**_BASE, "usage": {"completion_tokens": 2**63 - 1}}) + "\n")
    assert read_jsonl(path).timelines[0].usage == {"completion_tokens": 2**63 - 1}
