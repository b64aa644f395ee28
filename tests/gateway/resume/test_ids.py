"""Every event the gateway sends gets its ``id:`` (gateway/resume/ids.py)."""

from __future__ import annotations

from steadystream.gateway.resume.ids import stamp_events
from steadystream.protocol import SseEvent, new_decoder


def test_each_event_gets_the_next_id_as_its_last_field(build: str) -> None:
    data = b'data: {"a":1}\n\nevent: ping\ndata: {}\n\ndata: [DONE]\n\n'
    stamped, events = stamp_events(data, 7)
    assert stamped == (
        b'data: {"a":1}\nid: 7\n\nevent: ping\ndata: {}\nid: 8\n\ndata: [DONE]\nid: 9\n\n'
    )
    assert events == [
        b'data: {"a":1}\nid: 7\n\n',
        b"event: ping\ndata: {}\nid: 8\n\n",
        b"data: [DONE]\nid: 9\n\n",
    ]


def test_an_id_the_upstream_wrote_is_overridden_by_ours(build: str) -> None:
    stamped, _ = stamp_events(b"id: upstream-9\ndata: x\n\n", 1)
    items = new_decoder().feed(stamped)
    assert [(i.data, i.id) for i in items if isinstance(i, SseEvent)] == [("x", "1")]


def test_every_line_ending_sse_allows_is_understood(build: str) -> None:
    data = b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"
    stamped, events = stamp_events(data, 1)
    assert len(events) == 3
    items = [i for i in new_decoder().feed(stamped) if isinstance(i, SseEvent)]
    assert [(i.data, i.id) for i in items] == [("a", "1"), ("b", "2"), ("c", "3")]


def test_an_event_of_many_crlf_lines_stays_one_event(build: str) -> None:
    # A CRLF between two lines of one event is one line end, not a blank line (CR, LF): an
    # upstream that ends its lines so (Anthropic's SDK servers may) keeps its event types.
    data = b'event: message_start\r\ndata: {"a":1}\r\n\r\nevent: ping\r\ndata: {}\r\n\n'
    stamped, events = stamp_events(data, 1)
    assert len(events) == 2
    items = [i for i in new_decoder().feed(stamped) if isinstance(i, SseEvent)]
    assert [(i.event, i.data, i.id) for i in items] == [
        ("message_start", '{"a":1}', "1"),
        ("ping", "{}", "2"),
    ]


def test_comments_pass_without_an_id_and_are_not_kept(build: str) -> None:
    data = b": keepalive\n\ndata: x\n\n: one\n: two\n\n"
    stamped, events = stamp_events(data, 1)
    assert stamped == b": keepalive\n\ndata: x\nid: 1\n\n: one\n: two\n\n"
    assert events == [b"data: x\nid: 1\n\n"]


def test_a_comment_before_a_field_is_an_event(build: str) -> None:
    _, events = stamp_events(b": note\ndata: x\n\n", 4)
    assert events == [b": note\ndata: x\nid: 4\n\n"]


def test_a_read_of_one_event_or_one_comment(build: str) -> None:
    assert stamp_events(b"data: a\n\n", 3) == (b"data: a\nid: 3\n\n", [b"data: a\nid: 3\n\n"])
    assert stamp_events(b": keepalive\n\n", 3) == (b": keepalive\n\n", [])
    assert stamp_events(b"data: a\r\n\r\n", 3)[1] == [b"data: a\r\nid: 3\n\r\n"]


class _Shared:
    def __init__(self) -> None:
        self.appended: list[tuple[str, int, list[bytes], int]] = []

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        self.appended.append((stream_id, first_id, events, size))


def test_the_tee_numbers_on_keeps_scrubbed_events_in_both_stores(build: str) -> None:
    from steadystream.gateway.resume.ids import tee_build

    tee_class = tee_build().StreamTee
    assert tee_class.__module__.endswith("_c") is (build == "compiled")
    log, shared = tee_build().StreamLog(1 << 20), _Shared()
    tee = tee_class("s1", log, shared, lambda data: data.replace(b"sk-secret", b"sk-***"))
    seen: list[list[bytes]] = []
    tee.watch = seen.append
    assert tee.stamp(b"data: sk-secret\n\n") == b"data: sk-secret\nid: 1\n\n"  # (the client's
    # bytes are scrubbed by the relay before the tee: the tee scrubs only what it keeps)
    assert tee.stamp(b": ping\n\n") == b": ping\n\n"
    assert tee.stamp(b"data: a\n\ndata: b\n\n") == b"data: a\nid: 2\n\ndata: b\nid: 3\n\n"
    assert tee.next_id == 4
    kept = [b"data: sk-***\nid: 1\n\n", b"data: a\nid: 2\n\n", b"data: b\nid: 3\n\n"]
    assert log.events == kept
    assert log.size == sum(map(len, kept))
    assert shared.appended == [
        ("s1", 1, kept[:1], len(kept[0])),
        ("s1", 2, kept[1:], len(kept[1]) + len(kept[2])),
    ]
    assert seen == [kept[:1], kept[1:]]


def test_a_plain_tee_keeps_one_event_reads_as_they_go_and_drops_a_stream_past_its_bound(
    build: str,
) -> None:
    from steadystream.gateway.resume.ids import tee_build

    log = tee_build().StreamLog(40)
    tee = tee_build().StreamTee("s1", log, None, None)  # no keys, no shared store, no watch
    assert tee.stamp(b"data: a\n\n") == b"data: a\nid: 1\n\n"
    assert tee.stamp(b"data: b\r\n\r\n") == b"data: b\r\nid: 2\n\r\n"  # (not one LF line)
    assert log.events == [b"data: a\nid: 1\n\n", b"data: b\r\nid: 2\n\r\n"]
    assert log.size == 32
    assert tee.stamp(b"data: c\n\n") == b"data: c\nid: 3\n\n"  # past 40 bytes kept
    assert log.events == []
    assert log.gone is not None
    assert log.gone.reason == "too_large"
    assert tee.next_id == 4  # the ids go on for the reader who still reads


def test_a_log_tells_of_its_news_once_each_time_it_is_asked(build: str) -> None:
    # What the Redis store reads at each batch: only the logs that got events (or let go of
    # them) since it last asked, each listed once however many reads came.
    from steadystream.gateway.resume.ids import tee_build

    log = tee_build().StreamLog(100)
    tee = tee_build().StreamTee("s1", log, None, None)
    news: list[object] = []
    tee.stamp(b"data: a\n\n")
    assert news == []  # not asked yet
    log.tell_news(news, "s1")
    tee.stamp(b"data: b\n\n")
    tee.stamp(b"data: c\n\ndata: d\n\n")
    assert news == ["s1"]  # once, for three reads
    news.clear()
    tee.stamp(b"data: e\n\n")
    assert news == []  # not asked again
    log.tell_news(news, "s1")
    assert log.gone is None
    tee.stamp(b"data: ffffffffffffffff\n\n")  # past 100 bytes: let go of, news too
    assert log.gone is not None
    assert news == ["s1"]
    log.tell_news(news, "s1")
    log.drop(log.gone)
    assert news == ["s1", "s1"]
