"""The timeline model: builders, validation, token-count rules (DESIGN: token counts)."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream import Event, EventKind, Outcome, Timeline, TokenSource, Where
from steadystream.protocol import timeline_from_sse
from steadystream.timeline import assign_tokens, estimate_tokens, is_text_kind
from tests.support.timelines import MS, make_timeline

C, R, U = EventKind.CONTENT, EventKind.ROLE, EventKind.USAGE


def kinds(*ks: EventKind) -> np.ndarray:
    return np.array([int(k) for k in ks], dtype=np.uint8)


class TestAssignTokens:
    def test_usage_equal_to_text_events_gives_one_each(self) -> None:
        tokens, source = assign_tokens(
            kinds(R, C, C, C, U), np.array([0, 3, 5, 1, 0], np.int32), usage_completion_tokens=3
        )
        assert tokens.tolist() == [0, 1, 1, 1, 0]
        assert source is TokenSource.USAGE_ONE_PER_EVENT

    def test_usage_spread_in_proportion_to_text_adds_up_exactly(self) -> None:
        tokens, source = assign_tokens(
            kinds(R, C, C, C), np.array([0, 10, 30, 20], np.int32), usage_completion_tokens=10
        )
        assert source is TokenSource.USAGE_PROPORTIONAL
        assert tokens.sum() == 10
        assert tokens.tolist() == [0, 2, 5, 3]  # 1 each + 7 spread 10:30:20 by largest remainder

    def test_no_usage_estimates_from_text(self) -> None:
        texts = ["", "Hello", " world, how are you today?"]
        tokens, source = assign_tokens(kinds(R, C, C), np.array([0, 5, 26], np.int32), texts=texts)
        assert source is TokenSource.ESTIMATED
        assert tokens.tolist() == [0, estimate_tokens("Hello"), estimate_tokens(texts[2])]
        assert all(t >= 1 for t in tokens[1:])

    def test_a_usage_past_what_the_events_could_hold_is_no_count(self) -> None:
        # 2**40 tokens over two events overflowed the int32 counts, and the record was lost.
        tokens, source = assign_tokens(
            kinds(R, C, C), np.array([0, 8, 4], np.int32), usage_completion_tokens=2**40
        )
        assert source is TokenSource.ESTIMATED
        assert tokens.tolist() == [0, 2, 1]
        tokens, source = assign_tokens(
            kinds(C, C), np.array([8, 4], np.int32), usage_completion_tokens=2 * 65_536
        )
        assert source is TokenSource.USAGE_PROPORTIONAL  # (the bound itself is a count)
        assert int(tokens.sum()) == 2 * 65_536

    def test_no_text_kept_estimates_four_bytes_a_token(self) -> None:
        tokens, _ = assign_tokens(kinds(C, C), np.array([9, 1], np.int32))
        assert tokens.tolist() == [3, 1]

    def test_a_usage_total_below_the_text_events_is_kept_and_shared(self) -> None:
        # Four pieces of three bytes, two tokens: each token counts where it begins, so the
        # pieces 2 and 4 are the second halves of tokens 1 and 2 and hold none.
        tokens, source = assign_tokens(
            kinds(R, C, C, C, C, U),
            np.array([0, 3, 3, 3, 3, 0], np.int32),
            usage_completion_tokens=2,
        )
        assert source is TokenSource.USAGE_SHARED
        assert tokens.tolist() == [0, 1, 0, 1, 0, 0]

    def test_the_demos_paced_stream_keeps_its_80_tokens(self) -> None:
        # 114 text events for a usage total of 80 (the gateway's pacer cut tokens into pieces).
        rng = np.random.default_rng(7)
        sizes = rng.integers(1, 12, size=114).astype(np.int32)
        tokens, source = assign_tokens(kinds(*[C] * 114), sizes, usage_completion_tokens=80)
        assert source is TokenSource.USAGE_SHARED
        assert int(tokens.sum()) == 80
        assert tokens[0] >= 1  # the first piece of text begins the first token
        assert set(tokens.tolist()) <= {0, 1, 2}
        timeline = Timeline(
            "paced", Where.CLIENT, np.arange(114, dtype=np.int64) * MS, tokens,
            np.zeros(114, np.int32), sizes, kinds(*[C] * 114), token_source=source,
        )  # fmt: skip
        assert timeline.text_mask.all()  # a piece with no token of its own is still seen
        assert timeline.total_tokens == 80

    def test_a_stream_cut_at_max_tokens_has_exactly_max_tokens(self) -> None:
        one_each = np.full(64, 2, np.int32)
        tokens, source = assign_tokens(kinds(*[C] * 64), one_each, stopped_at_max_tokens=64)
        assert source is TokenSource.MAX_TOKENS
        assert tokens.tolist() == [1] * 64
        # Fewer, longer chunks: the 64 are spread as a usage total is.
        tokens, source = assign_tokens(
            kinds(C, C), np.array([10, 30], np.int32), stopped_at_max_tokens=64
        )
        assert (source, int(tokens.sum())) == (TokenSource.MAX_TOKENS, 64)
        # A usage total, when there is one, wins.
        _, source = assign_tokens(
            kinds(C, C), np.array([10, 30], np.int32),
            usage_completion_tokens=2, stopped_at_max_tokens=64,
        )  # fmt: skip
        assert source is TokenSource.USAGE_ONE_PER_EVENT

    def test_a_zero_total_for_visible_text_is_not_believed(self) -> None:
        tokens, source = assign_tokens(
            kinds(C, C), np.array([9, 1], np.int32), usage_completion_tokens=0
        )
        assert source is TokenSource.ESTIMATED
        assert tokens.tolist() == [3, 1]

    def test_empty_text_events_carry_no_token(self) -> None:
        tokens, _ = assign_tokens(
            kinds(C, C), np.array([0, 4], np.int32), usage_completion_tokens=1
        )
        assert tokens.tolist() == [0, 1]


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("one two three four") == 5  # ceil(18 / 4) beats 4 words


class TestTimeline:
    def test_from_events_defaults_first_byte_and_end(self) -> None:
        tl = make_timeline([100, 140], role_ms=20)
        assert tl.first_byte_ns == 20 * MS
        assert tl.end_ns == 140 * MS
        assert tl.total_tokens == 2
        assert tl.text == "w w "
        assert tl.text_mask.tolist() == [False, True, True]

    def test_mismatched_arrays_are_rejected(self) -> None:
        tl = make_timeline([100])
        with pytest.raises(ValueError, match="tokens has 2 entries, times has 3"):
            tl.replace(times=np.array([1, 2, 3], dtype=np.int64))
        with pytest.raises(ValueError, match="annotation 'cause'"):
            tl.replace(annotations={"cause": [None]})

    def test_without_text_and_equality(self) -> None:
        tl = make_timeline([100, 120])
        bare = tl.without_text()
        assert bare.texts is None
        assert bare.text is None
        assert bare != tl
        assert bare == tl.without_text()
        assert bare.events()[1] == Event(100 * MS, "", 1, C, 0)

    def test_repr_names_what_matters(self) -> None:
        tl = Timeline.from_events(
            [(5, "hi", 1, C)], stream_id="x", where=Where.LAB, outcome=Outcome.CANCELLED
        )
        assert repr(tl) == (
            "Timeline(stream_id='x', where='lab', events=1, tokens=1, outcome='cancelled')"
        )

    def test_sse_bytes_build_the_same_stream(self) -> None:
        body = (
            b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
            b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"finish_reason":null}]}\n\n'
            b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
            b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}\n\n'
            b"data: [DONE]\n\n"
        )
        split = body.index(b"data: {", 10)
        reads = [(10 * MS, body[:split]), (30 * MS, body[split:])]
        tl = timeline_from_sse(reads, stream_id="sse")
        assert tl.kinds.tolist() == [int(R), int(C)]
        assert tl.times.tolist() == [10 * MS, 30 * MS]
        assert tl.outcome is Outcome.COMPLETE
        assert tl.end_ns == 30 * MS


def test_text_kinds_by_table_lookup_agree_with_the_kinds_that_carry_text() -> None:
    values = np.arange(256, dtype=np.uint8)
    expected = np.array([v in {int(k) for k in EventKind if k.carries_text} for v in range(256)])
    assert (is_text_kind(values) == expected).all()
    assert (is_text_kind(values.astype(np.int64)) == expected).all()  # any integer dtype
    assert is_text_kind(np.empty(0, dtype=np.uint8)).shape == (0,)
