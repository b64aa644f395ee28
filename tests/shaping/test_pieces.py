"""The rule that cuts a chunk whose tokens leave at different times."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from steadystream.shaping._pieces import byte_cut, text_cuts


def pieces(text: str, tokens: int) -> list[str]:
    cuts = text_cuts(text, tokens)
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


def test_words_stay_whole_when_there_are_enough() -> None:
    assert pieces("one two three", 3) == ["one", " two", " three"]
    assert pieces("  lead and trail  ", 3) == ["  lead", " and", " trail  "]
    assert pieces("a b c d", 2) == ["a b", " c d"]


def test_characters_are_cut_when_words_are_fewer_than_tokens() -> None:
    assert pieces("unbelievable", 3) == ["unbe", "liev", "able"]
    assert pieces("ab", 4) == ["", "a", "", "b"]
    assert pieces("", 2) == ["", ""]
    assert pieces("x", 1) == ["x"]
    assert text_cuts("x", 0) == [0]


def test_bytes_are_divided_by_count() -> None:
    assert [byte_cut(i, 10, 3) for i in range(4)] == [0, 3, 6, 10]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40), tokens=st.integers(1, 12))
def test_every_character_lands_in_exactly_one_piece_in_order(text: str, tokens: int) -> None:
    cut = pieces(text, tokens)
    assert len(cut) == tokens
    assert "".join(cut) == text
