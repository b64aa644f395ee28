"""Deterministic pseudo-text."""

from __future__ import annotations

import numpy as np

from steadystream.lab.text import pseudo_text


def test_exact_token_count_and_same_seed_same_text() -> None:
    for tokens in (1, 2, 17, 300):
        a = pseudo_text(np.random.default_rng(7), tokens)
        b = pseudo_text(np.random.default_rng(7), tokens)
        assert len(a) == tokens
        assert a == b
    assert pseudo_text(np.random.default_rng(8), 50) != pseudo_text(np.random.default_rng(7), 50)
    assert pseudo_text(np.random.default_rng(1), 0) == []


def test_reads_like_prose_for_phrase_pacers() -> None:
    pieces = pseudo_text(np.random.default_rng(3), 600)
    text = "".join(pieces)
    assert not text.startswith(" ")
    assert pieces.count(",") >= 10
    assert pieces.count(".") >= 20
    assert "\n\n" in pieces
    sentences = [s.strip() for s in text.replace("\n\n", " ").split(".") if s.strip()]
    assert all(s[0].isupper() for s in sentences)
    assert " ," not in text
    assert "  " not in text
    # long words are two pieces, as subword tokenizers split them
    assert any(p.isalpha() and not p.startswith(" ") for p in pieces[1:])
