"""The on-disk record of a timeline, both ways; shared by the JSONL and Parquet formats.

A record is the dict that one JSONL line holds (docs/format.md). Writing refuses a timeline
that a reader would reject, so every file written reads back. Reading checks the scalars
record by record, and leaves the event arrays to ``_blocks``, which checks a whole block of
records at once.
"""

from __future__ import annotations

import functools
import math
import re
import struct
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np
import orjson

from steadystream._exceptions import InputError, TimelineFormatError
from steadystream._types import Outcome, TokenSource, Where
from steadystream.files._blocks import (
    COUNT_FIELDS,
    EVENT_LISTS,
    INT32_MAX,
    array_fault,
    assemble,
    concat,
    kind_letters,
    packers,
    unpack,
)
from steadystream.timeline import EVENT_ARRAYS, SCHEMA, SKEW_NS, Timeline, event_array

__all__ = ["check_schema", "decode_lines", "encode_records", "stream_fields"]

_SCHEMA_NAME, _, _SCHEMA_MAJOR = SCHEMA.partition("/")
_MISSING: Any = object()

_WHERES = {w.value: w for w in Where}
_OUTCOMES = {o.value: o for o in Outcome}
_TOKEN_SOURCES = {s.value: s for s in TokenSource}

# A safety net, not a policy: callers must not put credentials in labels or meta at all.
_SECRET_KEY = re.compile(
    r"authorization|api[-_]?key|passw(or)?d|secret|cookie|bearer|credential|"
    r"(access|refresh|session|auth)[-_]?token",
    re.IGNORECASE,
)


# -- writing ----------------------------------------------------------------------------------


def encode_records(batch: list[Timeline], keep_text: bool) -> list[dict[str, Any]]:
    """The record of each timeline (arrays left as numpy arrays for orjson or pyarrow).

    A timeline is checked here again, whole: its attributes can be set after it was built.
    """
    arrays = [_event_arrays(t, keep_text) for t in batch]
    fault = array_fault(
        [len(a["times"]) for a in arrays],
        concat([a["times"] for a in arrays]),
        {name: concat([a[name] for a in arrays]) for name in COUNT_FIELDS},
    )
    if fault is not None:
        index, _, message = fault
        _refuse(batch[index], message)
    return [_record(t, a, keep_text) for t, a in zip(batch, arrays, strict=True)]


def _event_arrays(t: Timeline, keep_text: bool) -> dict[str, Any]:
    """The event arrays of ``t`` in their dtypes, of one length (texts and annotations too)."""
    try:
        arrays = {name: event_array(getattr(t, name), name) for name in EVENT_ARRAYS}
    except ValueError as exc:
        _refuse(t, str(exc))
    n = len(arrays["times"])
    for name, array in arrays.items():
        if len(array) != n:
            _refuse(t, f"{name} has {len(array)} entries, times has {n}")
    if keep_text and t.texts is not None:
        if type(t.texts) is not list:
            _refuse(t, f"texts must be a list of strings or None, not {type(t.texts).__name__}")
        if len(t.texts) != n:
            _refuse(t, f"texts has {len(t.texts)} entries, times has {n}")
    if type(t.annotations) is not dict:
        _refuse(t, "annotations must map names to lists of labels")
    for name, notes in t.annotations.items():
        if type(name) is not str or type(notes) is not list:
            _refuse(t, "annotations must map names to lists of labels")
        if len(notes) != n:
            _refuse(t, f"annotation {name!r} has {len(notes)} entries, times has {n}")
    return arrays


def _refuse(t: Timeline, message: str) -> NoReturn:
    raise InputError(f"stream {t.stream_id!r} cannot be written: {message}")


def _record(t: Timeline, arrays: dict[str, Any], keep_text: bool) -> dict[str, Any]:
    letters = kind_letters(arrays["kinds"])
    if letters is None:
        raise InputError(f"stream {t.stream_id!r}: kinds holds a value that is no EventKind")
    fault = _value_fault(t, keep_text)
    if fault is not None:
        _refuse(t, fault)
    labels = t.labels
    if any(map(_is_secret, labels)):
        labels = {k: v for k, v in labels.items() if not _is_secret(k)}
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "id": t.stream_id,
        "where": t.where,
        "started_at": None if t.started_at is None else float(t.started_at),
        "labels": labels,
        "outcome": t.outcome,
        "error": t.error,
        # int(): a numpy integer set after construction is written as the int it is.
        "header_ns": None if t.header_ns is None else int(t.header_ns),
        "first_byte_ns": None if t.first_byte_ns is None else int(t.first_byte_ns),
        "end_ns": None if t.end_ns is None else int(t.end_ns),
        "usage": t.usage,
        "token_source": t.token_source,
        "times": arrays["times"],
        "tokens": arrays["tokens"],
        "wire_bytes": arrays["wire_bytes"],
        "text_bytes": arrays["text_bytes"],
        "kinds": letters,
    }
    if keep_text and t.texts is not None:
        record["texts"] = t.texts
    if t.annotations:
        record["annotations"] = t.annotations
    if t.meta:
        record["meta"] = _scrub(t.meta)
    return record


def _value_fault(t: Timeline, keep_text: bool) -> str | None:
    """What a reader would reject, or read back as another value, in ``t``'s other fields."""
    if type(t.stream_id) is not str:
        return f"id must be a string, not {type(t.stream_id).__name__}"
    # StrEnum members hash as their values, so one lookup accepts members and plain strings.
    for key, choices in (
        ("where", _WHERES),
        ("outcome", _OUTCOMES),
        ("token_source", _TOKEN_SOURCES),
    ):
        if not isinstance(getattr(t, key), str) or getattr(t, key) not in choices:
            return f"{key} must be one of {', '.join(choices)}"
    if t.started_at is not None and not (_is_number(t.started_at) and _in_calendar(t.started_at)):
        return (  # (JSON has no NaN, and every reader of a date takes these)
            "started_at must be a number of seconds within the calendar (years 1 to 9999) or None"
        )
    if t.error is not None and type(t.error) is not str:
        return f"error must be a string or None, not {type(t.error).__name__}"
    if not _is_str_map(t.labels) or not all(type(k) is str for k in t.labels):
        return "labels must map names to strings"
    if t.usage is not None and not (_is_int_map(t.usage) and _fits_int64(t.usage)):
        return "usage must map names to integers from 0 to below 2**63"
    for key in ("header_ns", "first_byte_ns", "end_ns"):
        value = getattr(t, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return f"{key} must be an integer of nanoseconds or None, not {value!r}"
        if value < 0:
            return f"{key} must not be negative (it counts from the request sent)"
        if value >= 2**63:
            return f"{key} must be an integer of 64 bits"
    if keep_text and t.texts is not None and not all(type(s) is str for s in t.texts):
        return "texts must be strings"
    for name, notes in t.annotations.items():
        if not all(n is None or type(n) is str for n in notes):
            return f"annotation {name!r} must hold strings or None"
    if type(t.meta) is not dict:
        return f"meta must be a dict, not {type(t.meta).__name__}"
    return None


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def _fits_int64(usage: dict[str, int]) -> bool:
    """Whether a usage's counts fit the int64 a Parquet file holds (and its keys are names)."""
    return all(type(k) is str and v < 2**63 for k, v in usage.items())


@functools.lru_cache(maxsize=4096)
def _is_secret(key: object) -> bool:
    return isinstance(key, str) and _SECRET_KEY.search(key) is not None


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if not _is_secret(k)}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


# -- reading ----------------------------------------------------------------------------------


def decode_lines(lines: list[bytes], first: int, path: str) -> list[Timeline]:
    """Timelines from JSONL lines, numbered from ``first``; blank lines are skipped.

    Each event list is packed to bytes as soon as its line is parsed (see ``packers``), so
    the Python objects of one line are freed before the next is parsed and memory stays
    warm in the cache.
    """
    fields: list[dict[str, Any]] = []
    lengths: list[int] = []
    numbers: list[int] = []
    kinds: list[str] = []
    times: list[bytes] = []
    tokens: list[bytes] = []
    wire_bytes: list[bytes] = []
    text_bytes: list[bytes] = []
    loads = orjson.loads
    for number, line in enumerate(lines, first):
        try:
            record = loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue
            _fail(f"not valid JSON ({exc})", path, number, None)
        if type(record) is not dict:
            _fail("a line must hold a JSON object", path, number, None)
        get = record.get
        if get("schema") != SCHEMA:  # before anything else: it decides what keys mean
            check_schema(get("schema", _MISSING), path, number)
        # Written out rather than looped over the four lists: this is the hottest loop.
        event_times, event_tokens = get("times", _MISSING), get("tokens", _MISSING)
        event_wire, event_text = get("wire_bytes", _MISSING), get("text_bytes", _MISSING)
        letters = get("kinds", _MISSING)
        n = len(event_times) if type(event_times) is list else -1
        if not (
            type(event_tokens) is list
            and type(event_wire) is list
            and type(event_text) is list
            and type(letters) is str
            and n == len(event_tokens) == len(event_wire) == len(event_text) == len(letters)
        ):
            _shape_fault(record, path, number)
        pack_times, pack_counts = packers(n)
        try:
            times.append(pack_times(*event_times))
            tokens.append(pack_counts(*event_tokens))
            wire_bytes.append(pack_counts(*event_wire))
            text_bytes.append(pack_counts(*event_text))
        except struct.error:
            _integer_fault(record, path, number)
        if (b"true" in line or b"false" in line) and _has_bool(record):  # (struct packs them)
            _integer_fault(record, path, number)
        fields.append(stream_fields(record, n, path, number))
        lengths.append(n)
        numbers.append(number)
        kinds.append(letters)
    counts = {
        "tokens": unpack(tokens, np.int32),
        "wire_bytes": unpack(wire_bytes, np.int32),
        "text_bytes": unpack(text_bytes, np.int32),
    }
    return assemble(
        fields, lengths, unpack(times, np.int64), counts, kinds, path=path, lines=numbers
    )


def _shape_fault(record: dict[str, Any], path: str, line: int) -> NoReturn:
    """Say which event list is missing, not a list, or of the wrong length."""
    n = -1
    for name in EVENT_LISTS:
        values = record.get(name, _MISSING)
        if type(values) is not list:
            _fail_type(values, name, "a list of integers", path, line)
        if n >= 0 and len(values) != n:
            _fail(f"{name} has {len(values)} entries, times has {n}", path, line, name)
        n = len(values)
    letters = record.get("kinds", _MISSING)
    if type(letters) is not str:
        _fail_type(letters, "kinds", "a string of kind letters", path, line)
    _fail(f"kinds has {len(letters)} letters, times has {n}", path, line, "kinds")


def _has_bool(record: dict[str, Any]) -> bool:
    """Whether an event list holds ``true`` or ``false`` (which ``struct`` packs as 1 and 0)."""
    return any(type(v) is bool for name in EVENT_LISTS for v in record[name])


def _integer_fault(record: dict[str, Any], path: str, line: int) -> NoReturn:
    """Say which event list holds something other than an integer of its size."""
    for name in EVENT_LISTS:
        values = record[name]
        if not all(type(v) is int for v in values):
            _fail(f"{name} must be a list of integers", path, line, name)
        limit = 2**63 if name == "times" else INT32_MAX + 1
        if any(v >= limit or v < -limit for v in values):
            bounds = "of 64 bits" if name == "times" else f"from 0 to {INT32_MAX}"
            _fail(f"{name} must hold integers {bounds}", path, line, name)
    raise AssertionError("unreachable: struct refused one of the lists")


def stream_fields(record: Mapping[str, Any], n: int, path: str, line: int) -> dict[str, Any]:
    """Check every key of a record but the event arrays; return them as Timeline arguments."""
    get = record.get
    schema = get("schema", _MISSING)
    if schema != SCHEMA:
        check_schema(schema, path, line)
    stream_id = get("id", _MISSING)
    if type(stream_id) is not str:
        _fail_type(stream_id, "id", "a string", path, line)
    fields: dict[str, Any] = {
        "stream_id": stream_id,
        "where": _choice(get("where", _MISSING), _WHERES, "where", path, line),
        "outcome": _choice(get("outcome", "complete"), _OUTCOMES, "outcome", path, line),
        "token_source": _choice(
            get("token_source", "exact"), _TOKEN_SOURCES, "token_source", path, line
        ),
    }
    started_at = get("started_at")
    if started_at is not None:
        if type(started_at) is not float and type(started_at) is not int:
            _fail_type(started_at, "started_at", "a number of seconds or null", path, line)
        if not _in_calendar(started_at):  # (JSON has no NaN; a Parquet double can be)
            _fail(
                "started_at must be a number of seconds within the calendar (years 1 to 9999)",
                path,
                line,
                "started_at",
            )
        fields["started_at"] = float(started_at)
    for key in ("header_ns", "first_byte_ns", "end_ns"):
        value = get(key)
        if value is not None and type(value) is not int:
            _fail_type(value, key, "an integer of nanoseconds or null", path, line)
        if value is not None and value < -SKEW_NS:
            _fail(f"{key} must not be negative (it counts from the request sent)", path, line, key)
        if value is not None and value >= 2**63:
            _fail(f"{key} must be an integer of 64 bits", path, line, key)
        fields[key] = value
    error = get("error")
    if error is not None and type(error) is not str:
        _fail_type(error, "error", "a string or null", path, line)
    fields["error"] = error
    labels = get("labels", _MISSING)
    if labels is not _MISSING:
        if not _is_str_map(labels):
            _fail("labels must be an object of strings", path, line, "labels")
        fields["labels"] = labels
    usage = get("usage")
    if usage is not None and not _is_int_map(usage):
        _fail(
            "usage must be an object of integers from 0 to 2**63 - 1, or null", path, line, "usage"
        )
    fields["usage"] = usage
    texts = get("texts")
    if texts is not None:
        if type(texts) is not list or not all(type(s) is str for s in texts):
            _fail("texts must be a list of strings", path, line, "texts")
        if len(texts) != n:
            _fail(f"texts has {len(texts)} entries, times has {n}", path, line, "texts")
        fields["texts"] = texts
    annotations = get("annotations", _MISSING)
    if annotations is not _MISSING:
        fields["annotations"] = _annotations(annotations, n, path, line)
    meta = get("meta", _MISSING)
    if meta is not _MISSING:
        if type(meta) is not dict:
            _fail_type(meta, "meta", "an object", path, line)
        fields["meta"] = meta
    return fields


def check_schema(schema: Any, path: str, line: int | None) -> None:
    """Accept any ``steadystream.timeline/1[.minor]``; reject other names and major versions."""
    if schema is _MISSING:
        _fail("missing required key 'schema'", path, line, "schema")
    name, _, version = schema.partition("/") if type(schema) is str else ("", "", "")
    major = version.split(".")[0]
    if name != _SCHEMA_NAME or not major.isdigit():
        _fail(f"not a steadystream timeline: schema is {schema!r}", path, line, "schema")
    if major != _SCHEMA_MAJOR:
        _fail(
            f"schema {schema!r} is major version {major}, but this steadystream reads major "
            f"version {_SCHEMA_MAJOR} ({SCHEMA}); a newer steadystream is needed",
            path,
            line,
            "schema",
        )


def _choice(value: Any, choices: Mapping[str, Any], key: str, path: str, line: int) -> Any:
    chosen = choices.get(value) if type(value) is str else None
    if chosen is None:
        if value is _MISSING:
            _fail(f"missing required key {key!r}", path, line, key)
        _fail(f"{key} must be one of {', '.join(choices)}; got {value!r}", path, line, key)
    return chosen


def _annotations(value: Any, n: int, path: str, line: int) -> dict[str, list[str | None]]:
    if type(value) is not dict:
        _fail_type(value, "annotations", "an object of lists", path, line)
    for name, notes in value.items():
        if type(notes) is not list or not all(v is None or type(v) is str for v in notes):
            _fail(
                f"annotation {name!r} must be a list of strings or null",
                path,
                line,
                "annotations",
            )
        if len(notes) != n:
            _fail(
                f"annotation {name!r} has {len(notes)} entries, times has {n}",
                path,
                line,
                "annotations",
            )
    return value


def _is_str_map(value: Any) -> bool:
    return type(value) is dict and all(type(v) is str for v in value.values())


_CALENDAR_S = (-62_135_596_800, 253_402_300_800)  # 0001-01-01 to 10000-01-01, UTC


def _in_calendar(seconds: float) -> bool:
    """Whether ``seconds`` (Unix) is a date: finite, and one ``datetime`` holds."""
    return math.isfinite(seconds) and _CALENDAR_S[0] <= seconds < _CALENDAR_S[1]


def _is_int_map(value: Any) -> bool:
    """An object of counts: integers from 0 (a usage), below 2**63 as the writers hold them
    (a count a writer refuses is not read either: every file read writes back)."""
    return type(value) is dict and all(
        type(v) is int and 0 <= v < _COUNT_LIMIT for v in value.values()
    )


_COUNT_LIMIT = 2**63


def _fail(message: str, path: str, line: int | None, field: str | None) -> NoReturn:
    raise TimelineFormatError(message, path=path, line=line, field=field)


def _fail_type(value: Any, key: str, expected: str, path: str, line: int) -> NoReturn:
    if value is _MISSING:
        _fail(f"missing required key {key!r}", path, line, key)
    _fail(f"{key} must be {expected}, not {type(value).__name__}", path, line, key)
