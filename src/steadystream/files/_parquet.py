"""Parquet timeline files: one row per stream, event arrays as list columns (needs pyarrow).

Imported only when a Parquet file is read or written, so pyarrow stays an optional extra
(``pip install steadystream[parquet]``). Rows go through the same record checks as JSONL lines
(``_records``): the schema name lives in the file's key-value metadata, scalars are checked row
by row and event arrays a record batch at a time. ``meta`` is stored as JSON text, since its
shape is free. docs/format.md lists the columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from steadystream._exceptions import InputError, TimelineFormatError
from steadystream._replace import replaced
from steadystream.files._blocks import COUNT_FIELDS, assemble, concat
from steadystream.files._records import check_schema, encode_records, stream_fields
from steadystream.timeline import SCHEMA, Timeline

__all__ = ["read_parquet", "write_parquet"]

_SCHEMA_KEY = b"steadystream.schema"
_ROWS_PER_BATCH = 65536
_EVENTS_PER_BATCH = 1 << 24  # list offsets are int32; this also bounds memory per batch
MAX_GROUP_EVENTS = 1 << 25
"""The most events a reader takes in one row group, by the file's footer: about what a JSONL
line of 256 MiB can hold. A file of a few kilobytes can encode a billion equal times, which
would take gigabytes to read."""

_STRING_MAP = pa.map_(pa.string(), pa.string())
_COLUMNS: dict[str, pa.DataType] = {
    "id": pa.string(),
    "where": pa.string(),
    "started_at": pa.float64(),
    "labels": _STRING_MAP,
    "outcome": pa.string(),
    "error": pa.string(),
    "header_ns": pa.int64(),
    "first_byte_ns": pa.int64(),
    "end_ns": pa.int64(),
    "usage": pa.map_(pa.string(), pa.int64()),
    "token_source": pa.string(),
    "times": pa.list_(pa.int64()),
    "tokens": pa.list_(pa.int32()),
    "wire_bytes": pa.list_(pa.int32()),
    "text_bytes": pa.list_(pa.int32()),
    "kinds": pa.string(),
    "annotations": pa.map_(pa.string(), pa.list_(pa.string())),
    "meta": pa.string(),  # JSON text
    "texts": pa.list_(pa.string()),  # written only with keep_text
}
_REQUIRED = ("id", "where", "times", "tokens", "wire_bytes", "text_bytes", "kinds")
_NULLABLE = frozenset(
    {"started_at", "error", "header_ns", "first_byte_ns", "end_ns", "usage", "meta", "texts"}
)
_DEFAULT_FOR_NULL = frozenset({"labels", "outcome", "token_source", "annotations", "meta"})
_EVENT_TYPES = {
    "times": np.int64,
    "tokens": np.int32,
    "wire_bytes": np.int32,
    "text_bytes": np.int32,
}


def write_parquet(path: str, timelines: Iterable[Timeline], *, keep_text: bool) -> int:
    """Write ``timelines`` to ``path`` and return how many were written."""
    names = [name for name in _COLUMNS if keep_text or name != "texts"]
    schema = pa.schema(
        [pa.field(name, _COLUMNS[name], nullable=name in _NULLABLE) for name in names],
        metadata={_SCHEMA_KEY: SCHEMA.encode()},
    )
    count = 0
    # A refused stream leaves the file that was there, not a part of the new one.
    with replaced(path) as target, pq.ParquetWriter(target, schema, compression="zstd") as writer:
        for batch in _batches(timelines):
            writer.write_batch(_record_batch(batch, keep_text, schema))
            count += len(batch)
    return count


def _batches(timelines: Iterable[Timeline]) -> Iterator[list[Timeline]]:
    batch: list[Timeline] = []
    events = 0
    for timeline in timelines:
        size = np.size(timeline.times)  # (checked with the batch: anything has a size)
        if batch and (len(batch) == _ROWS_PER_BATCH or events + size > _EVENTS_PER_BATCH):
            yield batch
            batch, events = [], 0
        batch.append(timeline)
        events += size
    if batch:
        yield batch


def _record_batch(batch: list[Timeline], keep_text: bool, schema: pa.Schema) -> pa.RecordBatch:
    records = encode_records(batch, keep_text)
    offsets = pa.array(np.concatenate([[0], np.cumsum([len(t) for t in batch])]), pa.int32())
    columns: dict[str, Any] = {  # (the records hold the arrays in their dtypes, checked)
        name: pa.ListArray.from_arrays(
            offsets, pa.array(concat([r[name] for r in records]).astype(dtype, copy=False))
        )
        for name, dtype in _EVENT_TYPES.items()
    }
    for name in ("id", "where", "outcome", "token_source"):
        columns[name] = [str(r[name]) for r in records]  # str() of a StrEnum is its value
    for name in ("started_at", "error", "header_ns", "first_byte_ns", "end_ns", "kinds"):
        columns[name] = [r[name] for r in records]
    columns["labels"] = [list(r["labels"].items()) for r in records]
    columns["usage"] = [None if r["usage"] is None else list(r["usage"].items()) for r in records]
    columns["annotations"] = [list(r.get("annotations", {}).items()) for r in records]
    columns["meta"] = [_meta_json(r) for r in records]
    if keep_text:
        columns["texts"] = [r.get("texts") for r in records]
    try:
        arrays = [pa.array(columns[f.name], f.type) for f in schema]
    except (pa.ArrowException, TypeError, ValueError) as exc:
        # The records were checked, so this is a value the checks do not know: say so in
        # the project's terms, naming the streams, rather than in pyarrow's.
        ids = ", ".join(repr(t.stream_id) for t in batch[:3]) + (", ..." if len(batch) > 3 else "")
        raise InputError(f"streams {ids} cannot be written as Parquet: {exc}") from exc
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _meta_json(record: dict[str, Any]) -> str | None:
    if "meta" not in record:
        return None
    try:
        return orjson.dumps(record["meta"], option=orjson.OPT_SERIALIZE_NUMPY).decode()
    except orjson.JSONEncodeError as exc:
        raise InputError(f"stream {record['id']!r}: meta cannot be written as JSON: {exc}") from exc


def read_parquet(path: str) -> list[Timeline]:
    """Load every stream of a Parquet timeline file."""
    try:
        file = pq.ParquetFile(path)
    except FileNotFoundError as exc:
        raise InputError(f"cannot read {path}: no such file") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise TimelineFormatError(f"not a Parquet file ({exc})", path=path) from exc
    with file:
        schema = file.schema_arrow
        name = (schema.metadata or {}).get(_SCHEMA_KEY)
        if name is None:
            raise TimelineFormatError(
                "not a steadystream timeline file: no steadystream.schema in its metadata",
                path=path,
            )
        check_schema(name.decode(errors="replace"), path, None)
        for column in _REQUIRED:
            if column not in schema.names:
                raise TimelineFormatError(
                    f"missing required column {column!r}", path=path, field=column
                )
        _check_sizes(file.metadata, path)
        columns = [c for c in _COLUMNS if c in schema.names]  # other columns are ignored
        timelines: list[Timeline] = []
        try:
            for batch in file.iter_batches(batch_size=_ROWS_PER_BATCH, columns=columns):
                timelines.extend(_timelines(batch, path, first_row=len(timelines) + 1))
        except (pa.ArrowException, OSError) as exc:
            # A damaged page behind an intact footer. pyarrow's message spans lines and may
            # quote the damaged bytes: one printable line of it goes in the error.
            printable = "".join(c if c.isprintable() else " " for c in str(exc))
            detail = " ".join(printable.split())
            raise TimelineFormatError(f"damaged Parquet data ({detail})", path=path) from exc
    return timelines


def _check_sizes(metadata: pq.FileMetaData, path: str) -> None:
    """Refuse a row group whose ``times`` hold more events than :data:`MAX_GROUP_EVENTS`."""
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            if chunk.path_in_schema.partition(".")[0] != "times":
                continue
            if chunk.num_values > MAX_GROUP_EVENTS:
                raise TimelineFormatError(
                    f"row group {group} holds {chunk.num_values:,} events, more than the"
                    f" {MAX_GROUP_EVENTS:,} a reader takes at once; not a timeline file",
                    path=path,
                    field="times",
                )


def _timelines(batch: pa.RecordBatch, path: str, first_row: int) -> list[Timeline]:
    rows = list(range(first_row, first_row + batch.num_rows))
    column = {name: _cast(batch.column(name), name, path) for name in batch.schema.names}
    events = {name: _list_column(column[name], name, path, rows) for name in _EVENT_TYPES}
    lengths = events["times"][0]
    for name, (counts, _) in events.items():
        if not np.array_equal(counts, lengths):
            row = int(np.argmax(counts != lengths))
            raise TimelineFormatError(
                f"{name} has {counts[row]} entries, times has {lengths[row]}",
                path=path,
                line=rows[row],
                field=name,
            )
    kinds = column["kinds"].to_pylist()
    scalars = {
        name: column[name].to_pylist()
        for name in column
        if name not in _EVENT_TYPES and name != "kinds"
    }
    fields = []
    for i, row in enumerate(rows):
        letters = kinds[i]
        if letters is None or len(letters) != lengths[i]:
            size = "null" if letters is None else f"{len(letters)} letters"
            raise TimelineFormatError(
                f"kinds has {size}, times has {lengths[i]}", path=path, line=row, field="kinds"
            )
        record = _row_record(scalars, i, path, row)
        fields.append(stream_fields(record, int(lengths[i]), path, row))
    return assemble(
        fields,
        lengths.tolist(),
        events["times"][1],
        {name: events[name][1] for name in COUNT_FIELDS},
        kinds,
        path=path,
        lines=rows,
    )


def _cast(array: pa.Array, name: str, path: str) -> pa.Array:
    expected = _COLUMNS[name]
    if array.type == expected:
        return array
    wrong = TimelineFormatError(
        f"column {name} has type {array.type}, expected {expected}", path=path, field=name
    )
    if not _castable(array.type, expected):
        # Arrow would parse strings as numbers, and cast 2.0 to 2 or 5 to "5": JSONL refuses
        # each of these values, and so does a Parquet file.
        raise wrong
    try:
        return array.cast(expected)  # safe: fails on overflow or lost precision
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise wrong from exc


def _castable(given: pa.DataType, expected: pa.DataType) -> bool:
    """Whether ``given`` holds values of the kind ``expected`` does: integers for integers,
    numbers for a float, text for text, lists and maps of those (nulls for anything)."""
    types = pa.types
    if types.is_dictionary(given):
        given = given.value_type
    if types.is_null(given):
        same = True
    elif types.is_integer(expected):
        same = types.is_integer(given)
    elif types.is_floating(expected):
        same = types.is_floating(given) or types.is_integer(given)
    elif types.is_string(expected):
        same = types.is_string(given) or types.is_large_string(given)
    elif types.is_map(expected):
        same = (
            types.is_map(given)
            and _castable(given.key_type, expected.key_type)
            and _castable(given.item_type, expected.item_type)
        )
    elif types.is_list(expected):
        lists = types.is_list(given) or types.is_large_list(given)
        same = (lists or types.is_fixed_size_list(given)) and _castable(
            given.value_type, expected.value_type
        )
    else:
        same = False
    return bool(same)


def _list_column(
    array: pa.Array, name: str, path: str, rows: list[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Entries per row, and all values one row after another (a writable copy)."""
    if array.null_count:
        row = rows[int(np.argmax(array.is_null().to_numpy(zero_copy_only=False)))]
        raise TimelineFormatError(f"{name} must not be null", path=path, line=row, field=name)
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    if array.values.null_count:
        raise TimelineFormatError(f"{name} must not hold nulls", path=path, field=name)
    return np.diff(offsets), np.array(values)


def _row_record(scalars: dict[str, list[Any]], i: int, path: str, row: int) -> dict[str, Any]:
    record: dict[str, Any] = {"schema": SCHEMA}
    for name, values in scalars.items():
        value = values[i]
        if value is None and name in _DEFAULT_FOR_NULL:
            continue  # as if the key were left out of a JSONL record
        if name in ("labels", "usage", "annotations") and value is not None:
            value = dict(value)
        elif name == "meta" and value is not None:
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise TimelineFormatError(
                    f"meta is not valid JSON ({exc})", path=path, line=row, field="meta"
                ) from exc
        record[name] = value
    return record
