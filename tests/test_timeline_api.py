"""The timeline's constructor and builders check what they are given, naming the field.

Everything else reads a timeline's fields as they are (metrics take ``where.value``, sums take
``kinds`` as uint8, gaps take ``times`` as never decreasing): a bad value is refused where it
comes in, never turned into a crash far away or a silently wrong number.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from steadystream import Event, EventKind, Outcome, Timeline, TokenSource, Where
from steadystream.files import read_jsonl, write_jsonl
from steadystream.timeline import SKEW_NS, event_array
from tests.support.timelines import make_timeline

C = EventKind.CONTENT


def three() -> Timeline:
    return Timeline.from_events([(0, "a", 1), (10**9, "b", 1), (2 * 10**9, "c", 1)], stream_id="s")


# -- the constructor (and replace) -------------------------------------------------------------


def test_enum_fields_given_as_their_values_become_members() -> None:
    t = three().replace(where="gateway-upstream", outcome="error", token_source="estimated")
    assert t.where is Where.GATEWAY_UPSTREAM
    assert t.outcome is Outcome.ERROR
    assert t.token_source is TokenSource.ESTIMATED
    assert repr(t) == (
        "Timeline(stream_id='s', where='gateway-upstream', events=3, tokens=3, outcome='error')"
    )


@pytest.mark.parametrize("field", ["where", "outcome", "token_source"])
def test_an_unknown_enum_value_is_refused_naming_the_field(field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be one of .*; got 'nowhere'"):
        three().replace(**{field: "nowhere"})


def test_arrays_given_as_lists_or_other_integer_dtypes_take_their_dtypes() -> None:
    t = three().replace(kinds=[1, 1, 1], times=[0, 5, 9], tokens=np.array([1, 2, 3], np.int64))
    assert (t.kinds.dtype, t.times.dtype, t.tokens.dtype) == (np.uint8, np.int64, np.int32)
    assert t.total_tokens == 6
    empty = Timeline.from_events([], stream_id="e").replace(times=[], kinds=[])
    assert (empty.times.dtype, empty.kinds.dtype) == (np.int64, np.uint8)


def test_arrays_of_the_right_dtype_are_kept_as_they_are() -> None:
    t = three()
    again = t.replace()
    assert all(getattr(again, name) is getattr(t, name) for name in ("times", "tokens", "kinds"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"times": np.array([0.5, 1.0, 2.0])}, "times must hold integers, not float64"),
        ({"tokens": np.array([1.5, 1.0, 1.0])}, "tokens must hold integers, not float64"),
        ({"times": np.array([[1, 2, 3]] * 3)}, "times must be a 1-D array of integers, not 2-D"),
        ({"times": np.array([2**63, 2**63 + 1, 2**63 + 2], np.uint64)}, "times holds 9223"),
        ({"kinds": np.array([-1, 1, 1])}, "kinds holds -1, which uint8 cannot"),
        ({"wire_bytes": [0, 0, 2**40]}, "wire_bytes holds 1099511627776, which int32 cannot"),
        ({"text_bytes": [True, False, True]}, "text_bytes must hold integers, not bool"),
        ({"times": [0, 1, 2**70]}, "times must hold integers, not object"),
        ({"kinds": "ccc"}, "kinds must be a 1-D array of integers, not 0-D"),
    ],
    ids=["float-times", "float-tokens", "2-D", "uint64", "kind-1", "int32", "bool", "huge", "str"],
)
def test_arrays_that_are_not_integers_of_their_size_are_refused(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        three().replace(**changes)


def test_decreasing_times_are_refused() -> None:
    with pytest.raises(
        ValueError, match="times must not decrease: event 1 at 1000 ns follows 2000"
    ):
        three().replace(times=np.array([2000, 1000, 3000]))


def test_times_may_begin_up_to_the_readers_skew_before_the_request() -> None:
    # Readers take times down to -SKEW_NS (older bench files), so those can be built again;
    # anything earlier is refused (a metric taken on it would be nonsense: TTFT -5 s).
    t = three().replace(times=np.array([-SKEW_NS, 0, 1]), header_ns=-SKEW_NS)
    assert t.times[0] == -SKEW_NS
    with pytest.raises(ValueError, match="times must not be before the request was sent"):
        three().replace(times=np.array([-SKEW_NS - 1, 0, 1]))
    with pytest.raises(ValueError, match=r"^end_ns must be from -1000000"):
        three().replace(end_ns=-5 * 10**9)


def test_whatever_a_reader_returns_can_be_built_again(tmp_path: Path) -> None:
    path = tmp_path / "old-bench.jsonl"
    skewed = three().replace(times=np.array([-SKEW_NS, 0, 1]))
    path.write_text(
        '{"schema":"steadystream.timeline/1","id":"s","where":"client","times":[-1000000,0,1],'
        '"tokens":[1,1,1],"wire_bytes":[0,0,0],"text_bytes":[1,1,1],"kinds":"ccc",'
        '"header_ns":-1000000}\n'
    )
    (read,) = read_jsonl(path).timelines
    assert read.replace() == read
    assert read.times.tolist() == skewed.times.tolist()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"stream_id": 7}, "stream_id must be a string, not int"),
        ({"header_ns": 1.5}, "header_ns must be an integer of nanoseconds or None, not 1.5"),
        ({"first_byte_ns": True}, "first_byte_ns must be an integer of nanoseconds or None"),
        ({"end_ns": 2**63}, "end_ns must be from"),
        ({"started_at": True}, "started_at must be a number of Unix seconds or None, not True"),
        ({"started_at": "now"}, "started_at must be a number of Unix seconds or None, not 'now'"),
    ],
)
def test_scalars_of_the_wrong_type_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        three().replace(**changes)


def test_numpy_scalars_become_plain_numbers() -> None:
    t = three().replace(header_ns=np.int64(5), started_at=np.float32(2.5))
    assert (type(t.header_ns), t.header_ns) == (int, 5)
    assert (type(t.started_at), t.started_at) == (float, 2.5)
    assert three().replace(started_at=1763729000).started_at == 1763729000.0


# -- from_events ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ((0.35, "lo", 1), "event 1: time_ns must be an integer of nanoseconds .*not 0.35"),
        (("5", "lo", 1), "event 1: time_ns must be an integer of nanoseconds .*not '5'"),
        ((float("nan"), "lo", 1), "event 1: time_ns must be an integer of nanoseconds .*nan"),
        ((2**70, "lo", 1), "event 1: time_ns must be from"),
        ((True, "lo", 1), "event 1: time_ns must be an integer"),
        ((5, None, 1), "event 1: text must be a string, not NoneType"),
        ((5, "\ud800", 1), "event 1: text is not valid Unicode"),
        ((5, "lo", -1), "event 1: tokens must be from 0 to 2147483647; got -1"),
        ((5, "lo", 1.9), "event 1: tokens must be an integer, not 1.9"),
        ((5, "lo", 1, "c"), "event 1: kind must be an EventKind .*; got 'c'"),
        ((5, "lo", 1, 99), "event 1: kind must be an EventKind .*; got 99"),
        ((5, "lo", 1, C, -4), "event 1: wire_bytes must be from 0"),
        ((5, "lo"), r"event 1: expected \(time_ns, text, tokens"),
    ],
)
def test_from_events_checks_each_event_naming_its_index_and_field(
    event: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Timeline.from_events([(0, "Hel", 1), event], stream_id="s")


def test_from_events_takes_numpy_integers_and_kind_values() -> None:
    t = Timeline.from_events(
        [(np.int64(3), "a", np.int32(1), 1, np.int64(9)), Event(5, "b", 1, EventKind.REASONING)],
        stream_id="s",
    )
    assert t.times.tolist() == [3, 5]
    assert t.kinds.tolist() == [int(C), int(EventKind.REASONING)]
    assert t.wire_bytes.tolist() == [9, 0]


def test_from_events_refuses_an_annotation_given_as_a_string() -> None:
    with pytest.raises(ValueError, match="annotation 'cause' must be a list of labels"):
        Timeline.from_events([(0, "a", 1)], stream_id="s", annotations={"cause": "x"})


# -- equality ------------------------------------------------------------------------------------


def test_equality_compares_arrays_in_meta_by_value(tmp_path: Path) -> None:
    t = make_timeline([10, 20]).replace(meta={"gpu": {"util": np.array([0.5, 0.7])}})
    assert t == copy.deepcopy(t)
    assert t != t.replace(meta={"gpu": {"util": np.array([0.5, 0.8])}})
    assert t != t.replace(meta={"gpu": {"util": np.array([0.5])}})
    # A file holds the array as a list: what is read back is equal.
    write_jsonl(tmp_path / "run.jsonl", [t], keep_text=True)
    assert read_jsonl(tmp_path / "run.jsonl").timelines == [t]


def test_event_array_is_the_constructors_conversion() -> None:
    assert event_array([1, 2], "tokens").dtype == np.int32
    with pytest.raises(ValueError, match="tokens holds 2147483648"):
        event_array([2**31], "tokens")
