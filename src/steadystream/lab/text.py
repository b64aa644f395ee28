"""Deterministic pseudo-text: sentences of common words with commas and periods.

The lab's answers mean nothing, but they look like prose to whatever reads them: phrase
pacers see commas and sentence ends, renderers see paragraphs. Each token is one word piece
(a word, half of a long word, a comma, a period or a paragraph break), so the token count of
an answer is exact. The same generator state gives the same text.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pseudo_text"]

_WORD_LIST = (
    "the of and to in is that it for as with was on be by this are from at or an have not "
    "which but they more can will one all about has their there been would when into also "
    "other these time some than its only new two may most any over such then first after "
    "where system model token stream request answer server client latency engine queue batch "
    "cache memory network user reading pace steady pause delay signal measure result value "
    "change because between through during without within before under around across every "
    "simple careful gradual different important particular structure process pattern moment "
    "question evidence approach response schedule capacity pressure sequence practical "
    "understanding measurement interesting throughput consistent experience perception"
)
_WORDS = tuple(_WORD_LIST.split())

_LONG_WORD = 8  # words this long or longer are two pieces, as subword tokenizers split them
_PIECES: tuple[tuple[str, ...], ...] = tuple(
    (f" {w[: len(w) // 2]}", w[len(w) // 2 :]) if len(w) >= _LONG_WORD else (f" {w}",)
    for w in _WORDS
)
_CAPITAL: tuple[tuple[str, ...], ...] = tuple(
    (p[0][:1] + p[0][1:2].upper() + p[0][2:], *p[1:]) for p in _PIECES
)
_PARAGRAPH = "\n\n"


def pseudo_text(rng: np.random.Generator, tokens: int) -> list[str]:
    """Exactly ``tokens`` text pieces drawn from ``rng``, beginning with no leading space."""
    if tokens <= 0:
        return []
    # Draw generously in one vectorised call; sentences are assembled from the draws in order.
    draws = max(16, tokens)
    words = rng.integers(0, len(_WORDS), size=draws)
    sentence_lengths = rng.integers(6, 19, size=draws // 4 + 4)
    comma_gaps = rng.integers(4, 9, size=draws // 3 + 4)
    paragraph_every = rng.integers(3, 7, size=draws // 6 + 4)
    pieces: list[str] = []
    w = s = c = p = 0
    sentences_in_paragraph = 0
    while len(pieces) < tokens:
        length = int(sentence_lengths[s % len(sentence_lengths)])
        s += 1
        since_comma = 0
        for position in range(length):
            table = _CAPITAL if position == 0 else _PIECES
            pieces.extend(table[int(words[w % draws])])
            w += 1
            since_comma += 1
            gap = int(comma_gaps[c % len(comma_gaps)])
            if since_comma >= gap and position < length - 3:
                pieces.append(",")
                since_comma = 0
                c += 1
        pieces.append(".")
        sentences_in_paragraph += 1
        if sentences_in_paragraph >= int(paragraph_every[p % len(paragraph_every)]):
            pieces.append(_PARAGRAPH)
            sentences_in_paragraph = 0
            p += 1
    text = pieces[:tokens]
    text[0] = text[0].lstrip(" ")
    # A paragraph break right after another piece is followed by a word with its space: drop
    # the space so paragraphs start cleanly.
    for i in range(1, len(text)):
        if text[i - 1] == _PARAGRAPH and text[i].startswith(" "):
            text[i] = text[i][1:]
    return text
