"""``phrase``: releases whole phrases, their words staggered.

People read in phrases. Tokens are held until a phrase ends, then the phrase leaves with its
tokens ``stagger`` apart (default 40 ms): fast enough to read as one unit, slow enough to
give a rhythm. A phrase ends after an event whose text ends with one of ``marks`` (default
``,.!?``), before an event whose first word is one of ``words`` (default ``and|but|or``:
a conjunction opens the next phrase), or when ``cap`` tokens (default 12) are waiting.
Without text (timelines recorded without it) only the cap ends a phrase. A phrase that one
event took past the cap leaves in ``cap`` releases, ``stagger`` apart, its tokens shared out
evenly (a recorded event may claim millions of tokens: never one release each).

A phrase that ends while the previous one is still being staggered releases what is left
of the previous one at once and starts right away: generation faster than the stagger never
makes the pacer fall further and further behind (it lags by at most one phrase).

Hides: the word-by-word ragged rhythm, and stalls inside a phrase (the phrase waits for its
end). Costs: each phrase's first token waits for the phrase to end (up to ``cap`` tokens of
generation, time to first token included), and a stall in mid-phrase holds the words before
it for as long as the stall lasts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import ClassVar

from steadystream._clock import NS_PER_MS
from steadystream._exceptions import SpecError
from steadystream._types import Nanos
from steadystream.shaping.base import (
    DEFAULT_TAIL_NS,
    TAIL_PARAM,
    Pacer,
    Param,
    check_count,
    check_duration,
)

__all__ = ["Phrase"]

_STRIP = ".,!?;:\"'()[]{}"


class Phrase(Pacer):
    """Hold tokens to a phrase boundary or a cap, then release them staggered."""

    name: ClassVar[str] = "phrase"
    params: ClassVar[tuple[Param, ...]] = (
        Param("marks", "chars", "marks", ",.!?", "characters that end a phrase"),
        Param("words", "words", "words", ("and", "but", "or"), "words that open a phrase"),
        Param("cap", "count", "cap", 12, "most tokens a phrase waits for"),
        Param("stagger", "duration", "stagger_ns", 40 * NS_PER_MS, "time between its tokens"),
        TAIL_PARAM,
    )

    def __init__(
        self,
        *,
        marks: str = ",.!?",
        words: Iterable[str] = ("and", "but", "or"),
        cap: int = 12,
        stagger_ns: int = 40 * NS_PER_MS,
        tail_ns: int = DEFAULT_TAIL_NS,
    ) -> None:
        if not isinstance(marks, str) or any(c.isspace() for c in marks):
            raise SpecError(f"phrase: marks must be punctuation characters, got {marks!r}")
        self.marks = marks
        # A plain string would be read as its characters ("and|but" -> a, n, d, |, ...).
        if isinstance(words, str) or not isinstance(words, Iterable):
            raise SpecError(
                f"phrase: words must be a list of words like ('and', 'but'), got {words!r}"
            )
        listed = tuple(words)
        if not all(isinstance(w, str) for w in listed):
            raise SpecError(f"phrase: words must be strings, got {listed!r}")
        self.words = tuple(w.lower() for w in listed)
        if any(not w or "|" in w or any(c.isspace() for c in w) for w in self.words):
            raise SpecError(f"phrase: words must be single words, got {self.words!r}")
        self.cap = check_count(self.name, "cap", cap, minimum=1)
        self.stagger_ns = check_duration(self.name, "stagger", stagger_ns, allow_zero=True)
        super().__init__(tail_ns=tail_ns)
        self.max_unscheduled = self.cap - 1
        self._opening = frozenset(self.words)
        self._waiting = 0  # tokens of the phrase not yet ended
        # Phrases being released:
        # [time of the next release, tokens, releases, releases made, stagger].
        self._phrases: deque[list[int]] = deque()

    def _arrived(self, now: Nanos, tokens: int, text: str) -> None:
        if self._waiting and self._opens_phrase(text):
            self._schedule(now)
        self._waiting += tokens
        stripped = text.rstrip()
        if (stripped and stripped[-1] in self.marks) or self._waiting >= self.cap:
            self._schedule(now)

    def _opens_phrase(self, text: str) -> bool:
        first = text.split(None, 1)
        return bool(first) and first[0].strip(_STRIP).lower() in self._opening

    def _schedule(self, now: Nanos) -> None:
        for phrase in self._phrases:  # the rest of earlier phrases leaves now
            phrase[0] = min(phrase[0], now)
            phrase[4] = 0
        # One token per release; a phrase that one event took past the cap (an event may claim
        # millions of tokens) leaves in `cap` releases, its tokens shared out evenly.
        tokens = self._waiting
        self._phrases.append([now, tokens, min(tokens, self.cap), 0, self.stagger_ns])
        self._waiting = 0

    def _release_count(self, now: Nanos) -> int:
        count = 0
        phrases = self._phrases
        while phrases and phrases[0][0] <= now:
            phrase = phrases[0]
            start, tokens, releases, made, stagger = phrase
            due = releases if stagger == 0 else min(releases, made + (now - start) // stagger + 1)
            count += due * tokens // releases - made * tokens // releases
            if due == releases:
                phrases.popleft()
            else:
                phrase[0] = start + (due - made) * stagger
                phrase[3] = due
        return count

    def _wake_at(self, now: Nanos) -> Nanos | None:
        return self._phrases[0][0] if self._phrases else None

    def _step(self) -> int:
        return self.stagger_ns
