"""The SSE decoder against the WHATWG parsing rules, and the encoder against the decoder."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadystream.protocol import (
    DONE,
    SseComment,
    SseDecoder,
    SseEvent,
    SseItem,
    encode_comment,
    encode_event,
)
from tests.support.sse import comments, cut, decode_reads

FUZZ = settings(max_examples=250, deadline=None)


def events(body: bytes) -> list[SseEvent]:
    items, _ = decode_reads([body])
    return [i for i in items if isinstance(i, SseEvent)]


def datas(body: bytes) -> list[str]:
    return [e.data for e in events(body)]


# -- line ends ----------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_end_gives_the_same_events(eol: bytes) -> None:
    body = eol.join([b"event: add", b"data: 1", b"data: 2", b"", b"data: 3", b"", b""])
    got = events(body)
    assert [(e.event, e.data) for e in got] == [("add", "1\n2"), ("message", "3")]
    assert sum(e.wire_bytes for e in got) == len(body)


def test_mixed_line_ends_in_one_stream() -> None:
    assert datas(b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r") == ["a\nb\nc", "d"]


def test_cr_then_lf_in_the_next_read_is_one_line_end() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: x\r") == []
    # Were the LF a second line end, this read would dispatch on it alone.
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\r\n") == [SseEvent("x", wire_bytes=len(b"data: x\r\n\r\n"))]


def test_an_event_ending_in_cr_is_dispatched_without_waiting_for_the_next_read() -> None:
    decoder = SseDecoder()
    (event,) = decoder.feed(b"data: x\r\n\r")
    assert event == SseEvent("x", wire_bytes=10)
    # The LF that completes the CRLF counts toward the next item (documented).
    (after,) = decoder.feed(b"\ndata: y\n\n")
    assert after.wire_bytes == 1 + len(b"data: y\n\n")


# -- fields -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "value"),
    [
        (b"data:x", "x"),
        (b"data: x", "x"),
        (b"data:  x", " x"),
        (b"data:\tx", "\tx"),
        (b"data: x ", "x "),
        (b"data: a:b", "a:b"),
        (b"data:", ""),
        (b"data", ""),
    ],
)
def test_exactly_one_leading_space_is_stripped(line: bytes, value: str) -> None:
    assert datas(line + b"\n\n") == [value]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert datas(b"data: one\ndata:\ndata: three\n\n") == ["one\n\nthree"]
    assert datas(b"data\ndata\n\n") == ["\n"]


def test_comments_are_items_with_one_space_stripped() -> None:
    items, _ = decode_reads([b": ping\n:pong\n:\n:  two spaces\n\n"])
    assert comments(items) == ["ping", "pong", "", " two spaces"]
    assert items[0] == SseComment("ping", wire_bytes=7)


def test_a_comment_inside_an_event_is_part_of_it() -> None:
    # Not an item of its own: the relay slices a read's bytes by the items' sizes, and a
    # comment cut out of an event's middle would take the event's first lines with it.
    stream = b"data: a\n: note\ndata: b\n\n: alone\n"
    for reads in ([stream], [bytes([b]) for b in stream]):
        items, _ = decode_reads(reads)
        assert items == [
            SseEvent("a\nb", wire_bytes=len(b"data: a\n: note\ndata: b\n\n")),
            SseComment("alone", wire_bytes=len(b": alone\n")),
        ]


def test_event_type_applies_to_one_event_and_defaults_to_message() -> None:
    got = events(b"event: add\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\nevent\ndata: 4\n\n")
    assert [e.event for e in got] == ["add", "message", "message", "message"]


def test_id_persists_until_changed_and_an_id_with_nul_is_ignored() -> None:
    body = b"data: a\n\nid: 7\ndata: b\n\ndata: c\n\nid: x\x00y\ndata: d\n\nid\ndata: e\n\n"
    assert [e.id for e in events(body)] == [None, "7", "7", "7", ""]


def test_last_event_id_changes_only_when_the_block_is_dispatched() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n") == [
        SseEvent("a", id="1", wire_bytes=15)
    ]
    assert decoder.last_event_id == "1"  # "id: 2" is in the buffer, not yet in force
    (event,) = decoder.feed(b"\n")
    assert (event.id, decoder.last_event_id) == ("2", "2")
    # A block with an id and no data dispatches nothing, but its blank line sets the id.
    assert decoder.feed(b"id: 3\n") == []
    assert decoder.last_event_id == "2"
    assert decoder.feed(b"\n") == []
    assert decoder.last_event_id == "3"


def test_a_block_cut_off_before_its_blank_line_leaves_the_last_event_id() -> None:
    decoder = SseDecoder()
    decoder.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n")
    decoder.close()
    assert decoder.last_event_id == "1"  # a reconnect resumes after the last event received
    assert decoder.incomplete_event == SseEvent("b", id="2", wire_bytes=14)


@pytest.mark.parametrize(
    ("body", "ids"),
    [
        # The three streams of web-platform-tests eventsource/resources/last-event-id2.py.
        (b"id: 1\ndata: 1\n\ndata:2\n\n", ["1", "1"]),
        (b"id: 1\ndata: 1\n\nid: 2\ndata:2\n\ndata:3\n\n", ["1", "2", "2"]),
        (b"id: 1\ndata: 1\n\nid:\ndata:2\n\ndata:3\n\n", ["1", "", ""]),
    ],
)
def test_last_event_id_persists_changes_and_resets_as_in_the_platform_tests(
    body: bytes, ids: list[str]
) -> None:
    decoder = SseDecoder()
    seen = []
    for line in body.splitlines(keepends=True):  # one line per read
        for item in decoder.feed(line):
            assert isinstance(item, SseEvent)
            assert item.id == decoder.last_event_id
            seen.append(item.id)
    assert seen == ids


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"3000", 3000),
        (b"0", 0),
        (b"", None),
        (b" 10", 10),
        (b"10x", None),
        (b"-1", None),
        (b"1.5", None),
        (b"\xd9\xa3", None),
    ],
)
def test_retry_takes_ascii_digits_only(value: bytes, expected: int | None) -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"retry:" + value + b"\ndata: x\n\n") == [
        SseEvent("x", retry=expected, wire_bytes=len(value) + 16)
    ]
    assert decoder.retry == expected


def test_retry_is_reported_once_and_kept_by_the_decoder() -> None:
    decoder = SseDecoder()
    first, second = decoder.feed(b"retry: 50\ndata: a\n\ndata: b\n\n")
    assert first == SseEvent("a", retry=50, wire_bytes=19)
    assert second == SseEvent("b", retry=None, wire_bytes=9)
    assert decoder.retry == 50


def test_a_huge_retry_value_is_ignored_not_raised() -> None:
    (event,) = events(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n")
    assert event.retry is None


def test_unknown_fields_are_ignored() -> None:
    assert datas(b"foo: bar\nData: no\ndata: yes\n\n") == ["yes"]


def test_a_block_without_data_is_not_dispatched_and_its_bytes_go_to_the_next_item() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"event: ping\nid: 3\nretry: 9\n\n") == []
    assert decoder.undispatched_bytes == 28
    assert not decoder.in_event
    (event,) = decoder.feed(b"data: x\n\n")
    assert event == SseEvent("x", "message", "3", 9, 28 + 9)


def test_blank_lines_alone_dispatch_nothing() -> None:
    assert decode_reads([b"\n\n\r\n\r"])[0] == []


# -- bytes and decoding -------------------------------------------------------------------------


def test_a_leading_bom_is_skipped_once_even_when_split() -> None:
    items, _ = decode_reads([b"\xef", b"\xbb", b"\xbfdata: a\n\n"])
    assert items == [SseEvent("a", wire_bytes=3 + 9)]
    # A second BOM is part of the field name, which is then unknown.
    assert datas(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n") == ["b"]
    assert datas(b"\xef\xbbdata: a\n\n") == []


def test_a_bom_after_the_start_is_kept_in_values() -> None:
    assert datas(b"data: \xef\xbb\xbfx\n\n") == ["\ufeffx"]


def test_a_multibyte_character_split_across_reads() -> None:
    body = "data: héllo – 世界 🙂\n\n".encode()
    for at in range(1, len(body)):
        items, _ = decode_reads([body[:at], body[at:]])
        assert items == [SseEvent("héllo – 世界 🙂", wire_bytes=len(body))]


def test_invalid_utf8_decodes_with_replacement() -> None:
    assert datas(b"data: a\xffb\xe2\x82\n\n") == ["a\ufffdb\ufffd"]


def test_only_cr_and_lf_end_lines() -> None:
    # str.splitlines would also split on these; SSE must not.
    assert datas(b"data: a\x0bb\x0c\x1c\x1d\x1e\xc2\x85\xe2\x80\xa8\n\n") == [
        "a\x0bb\x0c\x1c\x1d\x1e\x85\u2028"
    ]


# -- end of stream ------------------------------------------------------------------------------


def test_an_unfinished_event_is_discarded_at_close() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n") == [SseEvent("a", wire_bytes=9)]
    assert decoder.close() == []
    assert decoder.in_event
    assert decoder.undispatched_bytes == len(b"data: b\n")
    assert decoder.incomplete_event == SseEvent("b", wire_bytes=8)


def test_an_unterminated_last_line_is_reported_but_not_dispatched() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"id: 1\ndata: a\n\ndata: [DONE]") == [SseEvent("a", id="1", wire_bytes=15)]
    assert decoder.close() == []
    assert decoder.incomplete_event == SseEvent("[DONE]", id="1", wire_bytes=12)
    assert decoder.in_event


def test_a_field_on_an_unterminated_line_never_takes_effect() -> None:
    decoder = SseDecoder()
    decoder.feed(b"id: 1\ndata: a\n\ndata: b\nid: 2")
    decoder.close()
    assert decoder.last_event_id == "1"
    assert decoder.incomplete_event == SseEvent("b", id="2", wire_bytes=13)


def test_a_clean_end_is_not_mid_event() -> None:
    decoder = SseDecoder()
    decoder.feed(b"data: a\n\n: bye\n\n")
    decoder.close()
    assert not decoder.in_event
    assert decoder.incomplete_event is None
    assert decoder.undispatched_bytes == 1  # the blank line after the comment


def test_a_cut_comment_is_not_an_item() -> None:
    decoder = SseDecoder()
    decoder.feed(b": keep")
    assert decoder.close() == []
    assert decoder.incomplete_event is None
    assert decoder.in_event


def test_feed_after_close_is_an_error() -> None:
    decoder = SseDecoder()
    decoder.close()
    assert decoder.closed
    with pytest.raises(RuntimeError, match="after close"):
        decoder.feed(b"data: x\n\n")


def test_a_long_line_in_tiny_reads() -> None:
    payload = b"x" * 20_000
    body = b"data: " + payload + b"\n\n"
    decoder = SseDecoder()
    items: list[SseItem] = []
    for i in range(0, len(body), 3):
        items.extend(decoder.feed(body[i : i + 3]))
    assert items == [SseEvent(payload.decode(), wire_bytes=len(body))]


# -- encoder ------------------------------------------------------------------------------------


def test_encode_simple_and_multi_line_events() -> None:
    assert encode_event('{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(b"a\r\nb\rc\n") == b"data: a\ndata: b\ndata: c\ndata: \n\n"
    assert encode_event("x", event="add", id="7", retry=100) == (
        b"event: add\nid: 7\nretry: 100\ndata: x\n\n"
    )
    assert encode_event("[DONE]") == DONE


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"event": "a\nb"}, "event must be a single line"),
        ({"event": "a\rb"}, "event must be a single line"),
        ({"id": "1\n"}, "id must be a single line"),
        ({"id": "1\x002"}, "NUL"),
        ({"retry": -1}, "non-negative"),
    ],
)
def test_encode_rejects_what_decoders_would_misread(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


def test_encode_comment() -> None:
    assert encode_comment() == b":\n\n"
    assert encode_comment("ping") == b": ping\n\n"
    items, _ = decode_reads([encode_comment(" padded")])
    assert comments(items) == [" padded"]
    with pytest.raises(ValueError, match="single line"):
        encode_comment("a\nb")


# -- properties ---------------------------------------------------------------------------------

_fields = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=8)
_event = st.builds(
    lambda data, event, id_, retry: encode_event(data, event=event, id=id_, retry=retry),
    st.text(max_size=40),
    st.none() | _fields,
    st.none() | _fields,
    st.none() | st.integers(0, 10**6),
)
_stream = st.lists(_event | _fields.map(encode_comment), max_size=8).map(b"".join)


@FUZZ
@given(body=_stream, cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_any_split_of_an_encoded_stream_decodes_like_the_whole(
    body: bytes, cuts: list[int]
) -> None:
    whole, whole_decoder = decode_reads([body])
    split, split_decoder = decode_reads(cut(body, cuts))
    assert split == whole
    assert sum(i.wire_bytes for i in whole) + whole_decoder.undispatched_bytes == len(body)
    assert split_decoder.undispatched_bytes == whole_decoder.undispatched_bytes
    assert not split_decoder.in_event


_noise = st.lists(
    st.sampled_from(
        [
            b"data",
            b"event",
            b"id",
            b"retry",
            b":",
            b" ",
            b"\r",
            b"\n",
            b"\r\n",
            b"7",
            b"\x00",
            b"\xef\xbb\xbf",
            b"\xff",
            b"\xe2\x82",
            b"\xac",
        ]
    )
    | st.binary(max_size=6),
    max_size=40,
).map(b"".join)


@FUZZ
@given(body=_noise, cuts=st.lists(st.integers(0, 300), max_size=12))
def test_arbitrary_bytes_in_arbitrary_reads_never_raise_and_match_the_whole(
    body: bytes, cuts: list[int]
) -> None:
    reads = cut(body, cuts)
    whole, whole_decoder = decode_reads([body])
    split, split_decoder = decode_reads(reads)

    def content(items: list[SseItem]) -> list[SseItem]:
        return [i._replace(wire_bytes=0) for i in items]

    assert content(split) == content(whole)
    fed = sum(i.wire_bytes for i in split) + split_decoder.undispatched_bytes
    assert fed == len(body)
    crlf_split = any(a.endswith(b"\r") and b.startswith(b"\n") for a, b in pairwise(reads))
    if not crlf_split:  # only a CRLF cut in two may move a byte to the next item
        assert split == whole
        assert split_decoder.undispatched_bytes == whole_decoder.undispatched_bytes
    assert split_decoder.in_event == whole_decoder.in_event
    whole_incomplete, split_incomplete = (
        d.incomplete_event for d in (whole_decoder, split_decoder)
    )
    assert (split_incomplete is None) == (whole_incomplete is None)
    if whole_incomplete is not None and split_incomplete is not None:
        assert split_incomplete.data == whole_incomplete.data


def reference_decode(body: bytes) -> list[tuple[object, ...]]:
    """The WHATWG algorithm transcribed as plainly as possible, on the whole stream at once."""
    text = body.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = re.split("\r\n|\r|\n", text)[:-1]  # the last piece has no line end: discarded
    out: list[tuple[object, ...]] = []
    data, event_type, last_id, retry = "", "", None, None
    in_block = False  # (ours, not the spec's: a comment is an item only between blocks)
    for line in lines:
        if not line:
            if data:
                dispatched = data.removesuffix("\n")
                out.append(("event", dispatched, event_type or "message", last_id, retry))
                retry = None
            data, event_type, in_block = "", "", False
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if not name:
            if not in_block:
                out.append(("comment", value))
            continue
        in_block = True
        if name == "data":
            data += value + "\n"
        elif name == "event":
            event_type = value
        elif name == "id" and "\x00" not in value:
            last_id = value
        elif name == "retry" and value and all(c in "0123456789" for c in value):
            retry = int(value)
    return out


@FUZZ
@given(body=_noise)
def test_the_decoder_agrees_with_a_plain_transcription_of_the_spec(body: bytes) -> None:
    items, _ = decode_reads([body])
    ours = [("comment", i.text) if isinstance(i, SseComment) else ("event", *i[:4]) for i in items]
    assert ours == reference_decode(body)


@FUZZ
@given(
    data=st.text(st.characters(codec="utf-8")), event=st.none() | _fields, id_=st.none() | _fields
)
def test_encode_then_decode_round_trips(data: str, event: str | None, id_: str | None) -> None:
    body = encode_event(data, event=event, id=id_)
    (got,) = events(body)
    expected_data = data.replace("\r\n", "\n").replace("\r", "\n")
    assert got == SseEvent(expected_data, event or "message", id_, None, len(body))


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(codec="utf-8", exclude_characters="\r\n")).map(
                lambda text: b"data: " + text.encode() + b"\n\n"
            ),
            st.sampled_from(
                [b"data:x\n\n", b"data:  two\n\n", b"id: 7\n", b"retry: 40\n", b": c\n\n"]
            ),
        ),
        max_size=12,
    ),
    st.lists(st.integers(min_value=1, max_value=6), max_size=12),
)
def test_reads_of_whole_data_events_decode_as_line_by_line(
    blocks: list[bytes], groups: list[int]
) -> None:
    """Servers' reads are whole ``data:`` events, which the decoder reads without a pass per
    line: the same items, ids, retries and state as reading the same bytes one by one."""
    reads: list[bytes] = [b"data: first\n\n"]  # (a first read checks for a byte-order mark)
    rest = list(blocks)
    for size in [*groups, len(rest)]:
        if rest:
            reads.append(b"".join(rest[:size]))
            rest = rest[size:]
    whole, one_by_one = SseDecoder(), SseDecoder()
    for read in reads:
        got = whole.feed(read)
        want = [item for byte in read for item in one_by_one.feed(bytes([byte]))]
        assert got == want
        assert whole.last_event_id == one_by_one.last_event_id
        assert whole.undispatched_bytes == one_by_one.undispatched_bytes
        assert whole.in_event == one_by_one.in_event
