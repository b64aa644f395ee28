"""Property: any timeline survives every file format, with and without its text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadystream import EventKind, InputError, Outcome, Timeline, TokenSource, Where
from steadystream.files import read_timelines, write_timelines

pytest.importorskip("pyarrow")


_INT64 = st.integers(-(2**63), 2**63 - 1)
_COUNT = st.integers(0, 2**31 - 1)
_NANOS = st.integers(0, 2**63 - 1)  # (usage counts too: the writer refuses a negative one)
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
_KEY = st.text("abcdefgh_", min_size=1, max_size=6)  # can never spell a credential name
_JSON = st.recursive(
    st.none() | st.booleans() | _INT64 | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEY, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def timelines(draw: st.DrawFn) -> Timeline:
    n = draw(st.integers(0, 12))
    times = sorted(draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n)))
    optional_ns = st.none() | _NANOS
    return Timeline(
        stream_id=draw(_TEXT),
        where=draw(st.sampled_from(Where)),
        times=np.array(times, dtype=np.int64),
        tokens=np.array(draw(st.lists(_COUNT, min_size=n, max_size=n)), dtype=np.int32),
        wire_bytes=np.array(draw(st.lists(_COUNT, min_size=n, max_size=n)), dtype=np.int32),
        text_bytes=np.array(draw(st.lists(_COUNT, min_size=n, max_size=n)), dtype=np.int32),
        kinds=np.array(
            draw(st.lists(st.sampled_from(EventKind), min_size=n, max_size=n)), dtype=np.uint8
        ),
        texts=draw(st.none() | st.lists(_TEXT, min_size=n, max_size=n)),
        header_ns=draw(optional_ns),
        first_byte_ns=draw(optional_ns),
        end_ns=draw(optional_ns),
        outcome=draw(st.sampled_from(Outcome)),
        error=draw(st.none() | _TEXT),
        usage=draw(st.none() | st.dictionaries(_KEY, _NANOS, max_size=3)),
        token_source=draw(st.sampled_from(TokenSource)),
        labels=draw(st.dictionaries(_KEY, _TEXT, max_size=3)),
        started_at=draw(  # (a date: years 1 to 9999, as readers take)
            st.none() | st.floats(min_value=-62_135_596_800, max_value=253_402_300_799)
        ),
        annotations=draw(
            st.dictionaries(_KEY, st.lists(st.none() | _TEXT, min_size=n, max_size=n), max_size=2)
        ),
        meta=draw(st.dictionaries(_KEY, _JSON, max_size=3)),
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("property")


@settings(max_examples=40, deadline=None)
@given(streams=st.lists(timelines(), max_size=4), keep_text=st.booleans())
def test_any_timeline_round_trips(scratch: Path, streams: list[Timeline], keep_text: bool) -> None:
    expected = streams if keep_text else [t.without_text() for t in streams]
    for suffix in (".jsonl", ".jsonl.gz", ".parquet"):
        path = scratch / f"run{suffix}"
        write_timelines(path, streams, keep_text=keep_text)
        assert read_timelines(path).timelines == expected


_ODD_VALUES = st.sampled_from(
    [
        *(None, True, 1.5, -1, 2**63, 2**64, "x", "client", np.int64(3), np.float64(2.5), [], {}),
        *(np.array([1.5]), np.array([-1]), np.array([[1]]), np.array([2**63], np.uint64)),
    ]
)
_FIELDS = st.sampled_from(
    [
        "stream_id", "where", "times", "tokens", "wire_bytes", "text_bytes", "kinds", "texts",
        "header_ns", "first_byte_ns", "end_ns", "outcome", "error", "usage", "token_source",
        "labels", "started_at", "annotations", "meta",
    ]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(stream=timelines(), field=_FIELDS, value=_ODD_VALUES, keep_text=st.booleans())
def test_a_field_set_after_construction_is_written_faithfully_or_refused(
    scratch: Path, stream: Timeline, field: str, value: object, keep_text: bool
) -> None:
    """The writer refuses whatever a reader would reject or read back as another value."""
    setattr(stream, field, value)
    for suffix in (".jsonl", ".parquet"):
        path = scratch / f"odd{suffix}"
        try:
            write_timelines(path, [stream], keep_text=keep_text)
        except InputError:
            continue
        (back,) = read_timelines(path).timelines
        assert back == (stream if keep_text else stream.without_text())
