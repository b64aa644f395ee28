"""Timeline files: JSONL (plain and gzip) and Parquet round trips, cut files, bad lines."""

from __future__ import annotations

import gzip
import io
import re
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from steadystream import (
    SCHEMA,
    EventKind,
    InputError,
    Outcome,
    TimelineFormatError,
    TokenSource,
)
from steadystream.files import (
    JsonlWriter,
    iter_jsonl,
    read_jsonl,
    read_timelines,
    write_jsonl,
    write_timelines,
)
from tests.support.files import STREAMS, bare_stream, rich_stream
from tests.support.timelines import make_timeline

PARQUET = pytest.param(
    ".parquet",
    marks=pytest.mark.skipif(find_spec("pyarrow") is None, reason="pyarrow is not installed"),
)


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", PARQUET])
def test_round_trip_with_text_keeps_every_field(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"run{suffix}"
    assert write_timelines(path, STREAMS, keep_text=True) == 3
    result = read_timelines(path)
    assert result.timelines == STREAMS
    assert result.truncated_line is None
    assert result.timelines[0].texts == ["", "w ", "w w ", "w ", ""]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", PARQUET])
def test_text_is_not_stored_unless_asked(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"run{suffix}"
    write_timelines(path, STREAMS)
    loaded = read_timelines(path).timelines
    assert loaded == [t.without_text() for t in STREAMS]
    assert all(t.texts is None for t in loaded)
    assert b"w w" not in (
        gzip.decompress(path.read_bytes()) if suffix.endswith("gz") else path.read_bytes()
    )


def test_jsonl_key_set(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [rich_stream(), bare_stream()], keep_text=True)
    rich, bare = lines_of(path)
    always = {
        "schema",
        "id",
        "where",
        "started_at",
        "labels",
        "outcome",
        "error",
        "header_ns",
        "first_byte_ns",
        "end_ns",
        "usage",
        "token_source",
        "times",
        "tokens",
        "wire_bytes",
        "text_bytes",
        "kinds",
    }
    assert set(rich) == always | {"texts", "annotations", "meta"}
    assert set(bare) == always  # optional keys are left out when empty
    assert rich["schema"] == SCHEMA
    assert rich["kinds"] == "rcccu"
    assert rich["times"] == [0, 120_000_000, 140_000_000, 175_000_000, 176_000_000]


def test_the_example_in_the_format_doc_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[1] / "docs" / "format.md").read_text()
    path = tmp_path / "example.jsonl"
    path.write_text(doc.split("```json\n", 1)[1].split("\n", 1)[0] + "\n")
    (stream,) = read_jsonl(path).timelines
    assert "".join(k.code for k in map(EventKind, stream.kinds)) == "rcccnu"
    assert stream.text == "Hello, world! How"
    assert stream.usage is not None
    assert stream.total_tokens == stream.usage["completion_tokens"]
    assert stream.annotations["cause"][3] == "kv-preemption"


def test_strided_arrays_are_written(tmp_path: Path) -> None:
    # orjson serialises only contiguous arrays natively; a strided view takes the slow path.
    wide = np.arange(0, 40, 1, dtype=np.int64) * 1000
    stream = make_timeline([1, 2, 3, 4]).replace(times=wide[::8][:5])
    write_jsonl(tmp_path / "run.jsonl", [stream])
    assert read_jsonl(tmp_path / "run.jsonl").timelines == [stream.without_text()]


def test_write_to_open_files() -> None:
    binary, text = io.BytesIO(), io.StringIO()
    assert write_jsonl(binary, STREAMS) == 3
    assert write_jsonl(text, STREAMS) == 3
    assert binary.getvalue().decode() == text.getvalue()
    assert binary.getvalue().count(b"\n") == 3


# -- gzip -------------------------------------------------------------------------------------


def test_gzip_is_found_by_its_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl.gz"
    write_jsonl(path, STREAMS)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    renamed = path.rename(tmp_path / "plain-name.jsonl")
    assert read_jsonl(renamed).timelines == [t.without_text() for t in STREAMS]


def test_gzip_members_back_to_back_read_as_one_file(tmp_path: Path) -> None:
    one, two = tmp_path / "1.jsonl.gz", tmp_path / "2.jsonl.gz"
    write_jsonl(one, [bare_stream("a")])
    write_jsonl(two, [bare_stream("b")])
    both = tmp_path / "both.jsonl.gz"
    both.write_bytes(one.read_bytes() + two.read_bytes())
    assert [t.stream_id for t in read_jsonl(both).timelines] == ["a", "b"]


def test_cut_gzip_loads_what_it_holds(tmp_path: Path) -> None:
    streams = [make_timeline([20 * i for i in range(300)], stream_id=f"s{i}") for i in range(8)]
    path = tmp_path / "run.jsonl.gz"
    write_jsonl(path, streams)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = read_jsonl(path)
    assert result.truncated_line is not None
    assert result.timelines == [t.without_text() for t in streams[: result.truncated_line - 1]]


# -- cut and malformed files ------------------------------------------------------------------


def test_cut_last_line_loads_every_complete_stream(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, STREAMS)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"\n", 0, -1) + 30])  # 30 bytes into the last line
    result = read_jsonl(path)
    assert result.truncated_line == 3
    assert result.timelines == [t.without_text() for t in STREAMS[:2]]


def test_last_line_without_newline_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, STREAMS)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    result = read_jsonl(path)
    assert result.truncated_line is None
    assert len(result.timelines) == 3


def test_blank_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [bare_stream()])
    record = lines_of(path)[0]
    bad = {**record, "outcome": "exploded"}
    path.write_bytes(orjson.dumps(record) + b"\n\n  \r\n" + orjson.dumps(bad) + b"\n")
    with pytest.raises(TimelineFormatError) as caught:
        read_jsonl(path)
    assert caught.value.line == 4


def _edit(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    edited = {**record, **changes}
    return {k: v for k, v in edited.items() if v is not _DROP}


_DROP = object()

MALFORMED = {
    "float time": ({"times": [0, 1.5, 2, 3, 4]}, "times", "times must be a list of integers"),
    "string time": ({"times": [0, "1", 2, 3, 4]}, "times", "times must be a list of integers"),
    "times not a list": ({"times": "0,1"}, "times", "times must be a list of integers, not str"),
    "times go back": ({"times": [0, 5, 4, 6, 7]}, "times", "times must not decrease"),
    "negative time": (
        {"times": [-2_000_000, 5, 5, 6, 7]},
        "times",
        "times must not be negative (they count from the request sent): event 0 at -2000000 ns",
    ),
    "negative header": ({"header_ns": -1_000_001}, "header_ns", "header_ns must not be negative"),
    "negative end": ({"end_ns": -5_000_000}, "end_ns", "end_ns must not be negative"),
    "boolean time": ({"times": [True, 5, 5, 6, 7]}, "times", "times must be a list of integers"),
    "boolean tokens": ({"tokens": [0, 1, False, 1, 0]}, "tokens", "tokens must be a list of int"),
    "negative usage": ({"usage": {"total_tokens": -4}}, "usage", "integers from 0"),
    "boolean usage": ({"usage": {"total_tokens": True}}, "usage", "integers from 0"),
    "short kinds": ({"kinds": "rccc"}, "kinds", "kinds has 4 letters, times has 5"),
    "unknown kind": ({"kinds": "rcxcu"}, "kinds", "unknown kind letter 'x' at event 2"),
    "non-ascii kind": ({"kinds": "rcécu"}, "kinds", "unknown kind letter 'é'"),
    "short tokens": ({"tokens": [0, 1, 1]}, "tokens", "tokens has 3 entries, times has 5"),
    "negative bytes": ({"wire_bytes": [0, -1, 0, 0, 0]}, "wire_bytes", "from 0 to"),
    "huge tokens": ({"tokens": [0, 2**40, 0, 0, 0]}, "tokens", "integers from 0 to"),
    "bad outcome": (
        {"outcome": "exploded"},
        "outcome",
        "outcome must be one of complete, cancelled, ",
    ),
    "bad where": ({"where": "moon"}, "where", "where must be one of client, "),
    "missing id": ({"id": _DROP}, "id", "missing required key 'id'"),
    "missing text_bytes": ({"text_bytes": _DROP}, "text_bytes", "missing required key"),
    "labels not strings": ({"labels": {"model": 3}}, "labels", "labels must be an object"),
    "usage not integers": ({"usage": {"total_tokens": "4"}}, "usage", "usage must be"),
    "float header": ({"header_ns": 1.5}, "header_ns", "header_ns must be an integer"),
    "short annotation": ({"annotations": {"cause": [None]}}, "annotations", "has 1 entries"),
    "texts not strings": ({"texts": [1, 2, 3, 4, 5]}, "texts", "texts must be a list of str"),
    "missing schema": ({"schema": _DROP}, "schema", "missing required key 'schema'"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_line_names_file_line_and_field(tmp_path: Path, case: str) -> None:
    changes, field, message = MALFORMED[case]
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [bare_stream("a"), make_timeline([1, 2, 3], usage_ms=4), bare_stream("c")])
    records = lines_of(path)
    records[1] = _edit(records[1], **changes)
    write_lines(path, records)
    with pytest.raises(TimelineFormatError) as caught:
        read_jsonl(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 2, field)
    assert message in str(error)
    assert str(error).startswith(f"{path}:2: ")


def test_invalid_json_in_the_middle_is_an_error_not_a_cut(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, STREAMS)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[1][:40] + b"\n" + lines[2])
    with pytest.raises(TimelineFormatError, match="not valid JSON") as caught:
        read_jsonl(path)
    assert caught.value.line == 2


def test_unknown_keys_and_minor_versions_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [rich_stream()])
    (record,) = lines_of(path)
    write_lines(path, [{**record, "schema": SCHEMA + ".4", "gpu": {"id": 3}, "future": [1]}])
    assert read_jsonl(path).timelines == [rich_stream().without_text()]


def test_optional_keys_take_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    required = {
        "schema": SCHEMA,
        "id": "min",
        "where": "lab",
        "times": [5],
        "tokens": [1],
        "wire_bytes": [0],
        "text_bytes": [3],
        "kinds": "c",
    }
    write_lines(path, [required])
    (stream,) = read_jsonl(path).timelines
    assert (stream.outcome, stream.token_source, stream.labels, stream.meta) == (
        Outcome.COMPLETE,
        TokenSource.EXACT,
        {},
        {},
    )
    assert stream.started_at is stream.header_ns is stream.usage is stream.texts is None
    assert stream.kinds.tolist() == [EventKind.CONTENT]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("steadystream.timeline/2", "major version 2, but this steadystream reads major version 1"),
        ("steadystream.timeline/2.0", "major version 2"),
        ("otherproject.trace/1", "not a steadystream timeline"),
        (7, "not a steadystream timeline"),
    ],
)
def test_other_schemas_are_rejected(tmp_path: Path, schema: object, message: str) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [bare_stream()])
    (record,) = lines_of(path)
    write_lines(path, [{**record, "schema": schema, "times": "other formats differ"}])
    with pytest.raises(TimelineFormatError, match=message) as caught:
        read_jsonl(path)
    assert caught.value.field == "schema"


# -- credentials ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", PARQUET])
def test_credential_keys_are_stripped(tmp_path: Path, suffix: str) -> None:
    stream = bare_stream().replace(
        labels={"model": "lab", "Authorization": "Bearer sk-1", "X-API-Key": "sk-2"},
        meta={
            "run": 1,
            "password": "pw",
            "headers": {"api_key": "sk-3", "accept": "*/*"},
            "hops": [{"Token-Secret": "sk-4", "host": "a"}],
        },
    )
    path = tmp_path / f"run{suffix}"
    write_timelines(path, [stream])
    (loaded,) = read_timelines(path).timelines
    assert loaded.labels == {"model": "lab"}
    assert loaded.meta == {"run": 1, "headers": {"accept": "*/*"}, "hops": [{"host": "a"}]}
    assert b"sk-" not in path.read_bytes()


# -- the incremental writer and streaming reads ------------------------------------------------


def test_writer_flushes_each_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = JsonlWriter(path)
    writer.write(bare_stream("a"))
    assert [t.stream_id for t in read_jsonl(path).timelines] == ["a"]  # before close
    writer.close()
    assert writer.written == 1


def test_writer_keeps_finished_lines_when_the_run_fails(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"

    def run() -> None:
        with JsonlWriter(path, keep_text=True) as writer:
            writer.write(rich_stream("a"))
            writer.write(rich_stream("b"))
            raise RuntimeError("the load generator died")

    with pytest.raises(RuntimeError, match="died"):
        run()
    assert read_jsonl(path).timelines == [rich_stream("a"), rich_stream("b")]


def test_times_a_little_before_the_request_sent_read_as_written(tmp_path: Path) -> None:
    # Earlier bench versions could stamp an answer's head a few µs before their clock read
    # after the send: the files they wrote still read (a writer now refuses any of it).
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [make_timeline([1, 2, 3], usage_ms=4)])
    (record,) = lines_of(path)
    times = [-41_558, *record["times"][1:]]
    write_lines(path, [{**record, "header_ns": -41_558, "first_byte_ns": -41_558, "times": times}])
    (stream,) = read_jsonl(path).timelines
    assert stream.header_ns == stream.first_byte_ns == stream.times[0] == -41_558


def test_a_word_true_in_a_text_is_no_boolean(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [rich_stream().replace(labels={"note": "true or false"})], keep_text=True)
    assert read_jsonl(path).timelines[0].labels == {"note": "true or false"}


def test_writer_refuses_what_a_reader_would_reject(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    backwards = bare_stream("back")  # (the constructor refuses such times: set them after)
    backwards.times = np.array([5, 4, 6], dtype=np.int64)
    with JsonlWriter(path) as writer:
        writer.write(bare_stream("ok"))
        with pytest.raises(InputError, match="'back' cannot be written: times must not"):
            writer.write(backwards)
    assert [t.stream_id for t in read_jsonl(path).timelines] == ["ok"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"times": np.array([-5, 4, 6], dtype=np.int64)}, "times must not be negative"),
        ({"header_ns": -2}, "header_ns must not be negative"),
        ({"first_byte_ns": -2}, "first_byte_ns must not be negative"),
        ({"usage": {"completion_tokens": -1}}, "usage must map names to integers from 0"),
    ],
    ids=["time", "header", "first byte", "usage"],
)
def test_writer_refuses_negative_times_and_counts(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    path = tmp_path / "run.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(bare_stream("ok"))
        with pytest.raises(InputError, match=f"'bad' cannot be written: {message}"):
            writer.write(bare_stream("bad").replace(**changes))
    assert [t.stream_id for t in read_jsonl(path).timelines] == ["ok"]


def test_append_after_a_crash_drops_the_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [bare_stream("a"), bare_stream("cut")])
    data = path.read_bytes()
    path.write_bytes(data[:-25])
    with JsonlWriter(path, append=True) as writer:
        writer.write(bare_stream("b"))
    assert writer.dropped_bytes == len(data) - 25 - data.index(b"\n") - 1
    result = read_jsonl(path)
    assert [t.stream_id for t in result.timelines] == ["a", "b"]
    assert result.truncated_line is None


def test_append_keeps_a_whole_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [bare_stream("a")])
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    with JsonlWriter(path, append=True) as writer:
        writer.write(bare_stream("b"))
    assert writer.dropped_bytes == 0
    assert [t.stream_id for t in read_jsonl(path).timelines] == ["a", "b"]


def test_gzip_writer_lines_survive_without_close(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl.gz"
    writer = JsonlWriter(path)
    writer.write(bare_stream("a"))
    writer.write(bare_stream("b"))
    result = read_jsonl(path)  # as a crash would leave it: no gzip trailer yet
    writer.close()
    assert [t.stream_id for t in result.timelines] == ["a", "b"]
    assert result.truncated_line is None


def test_append_to_gzip_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="append needs a plain"):
        JsonlWriter(tmp_path / "run.jsonl.gz", append=True)


def test_iter_jsonl_streams_and_reports_the_cut(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, STREAMS)
    path.write_bytes(path.read_bytes()[:-10])
    reader = iter_jsonl(path)
    assert next(reader).stream_id == "rich"
    assert reader.truncated_line is None  # not known until the end
    assert [t.stream_id for t in reader] == ["bare"]
    assert reader.truncated_line == 3


def test_missing_file_and_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_jsonl(tmp_path / "absent.jsonl")
    with pytest.raises(InputError, match="unknown timeline file suffix"):
        read_timelines(tmp_path / "run.csv")


def test_a_small_gzip_file_holding_a_huge_line_is_refused_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steadystream.files import _jsonl

    monkeypatch.setattr(_jsonl, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(_jsonl, "_BLOCK_BYTES", 64 << 10)
    path = tmp_path / "bomb.jsonl.gz"
    line = b'{"schema":"' + b"x" * (24 << 20) + b'"}\n'  # one line, ending, 24 MiB inflated
    path.write_bytes(gzip.compress(line, compresslevel=9))
    assert path.stat().st_size < 100_000
    pieces = list(_jsonl._chunks(str(path)))
    assert max(map(len, pieces)) <= 64 << 10
    assert b"".join(pieces) == line
    with pytest.raises(TimelineFormatError, match="a line longer than 1 MiB"):
        read_jsonl(path)


# -- what the writer refuses, and what a refused write leaves ----------------------------------

# Set after construction (the constructor refuses most of these): the writer holds on its own.
_SET_AFTER: list[tuple[str, Any, str]] = [
    ("times", np.array([1.5, 2.0, 3.0]), "times must hold integers, not float64"),
    ("tokens", np.array([1.5, 1.0]), "tokens must hold integers, not float64"),
    ("times", np.array([[1, 2]] * 2), "times must be a 1-D array of integers, not 2-D"),
    ("times", np.array([2**63, 2**63 + 1], np.uint64), "times holds 9223372036854775809"),
    ("times", np.array([5, 1]), "times must not decrease"),
    ("tokens", np.array([1]), "tokens has 1 entries, times has 2"),
    ("kinds", np.array([-1, 1]), "kinds holds -1, which uint8 cannot"),
    ("kinds", np.array([1, 99], np.uint8), "kinds holds a value that is no EventKind"),
    ("stream_id", 7, "id must be a string, not int"),
    ("where", "nowhere", "where must be one of"),
    ("error", 5, "error must be a string or None, not int"),
    ("header_ns", 1.5, "header_ns must be an integer of nanoseconds or None, not 1.5"),
    ("header_ns", True, "header_ns must be an integer of nanoseconds or None, not True"),
    ("end_ns", 2**63, "end_ns must be an integer of 64 bits"),
    ("started_at", True, "started_at must be a number of seconds within the calendar"),
    ("started_at", "now", "started_at must be a number of seconds within the calendar"),
    ("started_at", 1e20, "started_at must be a number of seconds within the calendar"),
    ("labels", {1: "a"}, "labels must map names to strings"),
    ("usage", {"total_tokens": 2**63}, "usage must map names to integers from 0 to below 2"),
    ("annotations", {"cause": ["x"]}, "annotation 'cause' has 1 entries, times has 2"),
    ("meta", ["not", "a", "dict"], "meta must be a dict, not list"),
]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", PARQUET])
@pytest.mark.parametrize(
    ("field", "value", "message"), _SET_AFTER, ids=[f"{f}-{m[:24]}" for f, _, m in _SET_AFTER]
)
def test_writer_refuses_what_was_set_after_construction(
    tmp_path: Path, suffix: str, field: str, value: Any, message: str
) -> None:
    bad = make_timeline([1, 2], role_ms=None)
    setattr(bad, field, value)
    with pytest.raises(InputError, match=re.escape(message)):
        write_timelines(tmp_path / f"run{suffix}", [bad])


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", PARQUET])
def test_a_refused_write_keeps_the_file_that_was_there(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"run{suffix}"
    write_timelines(path, STREAMS)
    before = path.read_bytes()
    path.chmod(0o640)
    bad = bare_stream("bad")
    bad.times = np.array([5, 1], dtype=np.int64)
    with pytest.raises(InputError, match="'bad' cannot be written"):
        write_timelines(path, [bare_stream("good"), bad])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file is left
    write_timelines(path, [bare_stream("good")])  # a write that succeeds replaces it
    assert [t.stream_id for t in read_timelines(path).timelines] == ["good"]
    assert path.stat().st_mode & 0o777 == 0o640  # and keeps its permissions
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_write_through_a_link_replaces_the_file_it_names(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "run.jsonl"
    target.parent.mkdir()
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)
    write_timelines(link, [bare_stream("a")])
    assert link.is_symlink()
    assert [t.stream_id for t in read_timelines(target).timelines] == ["a"]


def test_a_write_into_a_missing_folder_names_the_file_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "run.jsonl"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
        write_timelines(path, [bare_stream("a")])


def test_gzip_header_names_the_file_not_the_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl.gz"
    write_timelines(path, [bare_stream("a")])
    data = path.read_bytes()
    assert data[3] & 0x08  # FNAME is set, and holds the name the file has
    assert data[10:].split(b"\0", 1)[0] == b"run.jsonl"


def test_kind_letters_refuses_negative_kinds() -> None:
    from steadystream.files._blocks import kind_letters

    assert kind_letters(np.array([-1, 1])) is None  # take() would read -1 as the last letter
    assert kind_letters(np.array([1, 7])) == "cn"
