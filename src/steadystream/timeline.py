"""The stream timeline: one streamed response as parallel arrays of timed chunk events.

Every part of steadystream speaks this model (docs/format.md describes it field by field):
producers (bench, gateway, lab) make timelines, transforms (pacers, injection) turn timelines
into timelines, consumers (metrics, attribution, reports) read them.

Times are integer nanoseconds offset from the stream's own request-sent instant, so runs
recorded by many processes merge without clock arithmetic. Events are kept as parallel
arrays, never one object per chunk: that is what keeps analysis of millions of chunks fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream._types import (
    TEXT_KINDS,
    VISIBLE_KINDS,
    Event,
    EventKind,
    Int64Array,
    Nanos,
    Outcome,
    TokenSource,
    Where,
)

__all__ = [
    "SCHEMA",
    "Timeline",
    "assign_tokens",
    "estimate_tokens",
    "is_text_event",
    "is_text_kind",
]

SCHEMA = "steadystream.timeline/1"

_TEXT_KIND_VALUES = np.array(sorted(int(k) for k in TEXT_KINDS), dtype=np.uint8)
_IS_TEXT_KIND = np.isin(np.arange(256), _TEXT_KIND_VALUES)  # by kind value: one lookup
_IS_VISIBLE_KIND = np.isin(np.arange(256), [int(k) for k in VISIBLE_KINDS])


@dataclass(slots=True, eq=False)
class Timeline:
    """One stream, seen from one vantage point.

    Parallel event arrays (all the same length, in arrival order):

    - ``times``: int64 ns offsets from request sent
    - ``tokens``: int32 token count of each event
    - ``wire_bytes``: int32 bytes the event took on the wire (0 when unknown)
    - ``text_bytes``: int32 UTF-8 bytes of the event's text
    - ``kinds``: uint8 :class:`EventKind` values
    - ``texts``: the text pieces, only when the recorder was told to keep text

    ``annotations`` maps a name (for example ``"cause"``) to one label per event; the label at
    index ``i`` describes the gap that ends at event ``i`` (None: nothing to say).
    """

    stream_id: str
    where: Where
    times: Int64Array
    tokens: npt.NDArray[np.int32]
    wire_bytes: npt.NDArray[np.int32]
    text_bytes: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.uint8]
    texts: list[str] | None = None
    header_ns: Nanos | None = None
    first_byte_ns: Nanos | None = None
    end_ns: Nanos | None = None
    outcome: Outcome = Outcome.COMPLETE
    error: str | None = None
    usage: dict[str, int] | None = None
    token_source: TokenSource = TokenSource.EXACT
    labels: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None  # wall-clock UTC start, unix seconds
    annotations: dict[str, list[str | None]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.times)
        for name in ("tokens", "wire_bytes", "text_bytes", "kinds"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries, times has {n}")
        if self.texts is not None and len(self.texts) != n:
            raise ValueError(f"texts has {len(self.texts)} entries, times has {n}")
        for name, notes in self.annotations.items():
            if len(notes) != n:
                raise ValueError(f"annotation {name!r} has {len(notes)} entries, times has {n}")

    # -- builders ---------------------------------------------------------------------------

    @classmethod
    def from_events(
        cls,
        events: Iterable[Event | tuple[Any, ...]],
        *,
        stream_id: str,
        where: Where | str = Where.CLIENT,
        keep_text: bool = True,
        header_ns: Nanos | None = None,
        first_byte_ns: Nanos | None = None,
        end_ns: Nanos | None = None,
        outcome: Outcome | str = Outcome.COMPLETE,
        error: str | None = None,
        usage: Mapping[str, int] | None = None,
        token_source: TokenSource | str = TokenSource.EXACT,
        labels: Mapping[str, str] | None = None,
        started_at: float | None = None,
        annotations: Mapping[str, Sequence[str | None]] | None = None,
    ) -> Timeline:
        """Build a timeline from ``(time_ns, text, tokens, kind[, wire_bytes])`` events.

        ``first_byte_ns`` defaults to the first event's time and ``end_ns`` to the last's.
        """
        rows = [Event(*e) for e in events]
        times = np.fromiter((e.time_ns for e in rows), dtype=np.int64, count=len(rows))
        text_bytes = np.fromiter(
            (len(e.text.encode()) for e in rows), dtype=np.int32, count=len(rows)
        )
        return cls(
            stream_id=stream_id,
            where=Where(where),
            times=times,
            tokens=np.fromiter((e.tokens for e in rows), dtype=np.int32, count=len(rows)),
            wire_bytes=np.fromiter(
                (e.wire_bytes or 0 for e in rows), dtype=np.int32, count=len(rows)
            ),
            text_bytes=text_bytes,
            kinds=np.fromiter((int(e.kind) for e in rows), dtype=np.uint8, count=len(rows)),
            texts=[e.text for e in rows] if keep_text else None,
            header_ns=header_ns,
            first_byte_ns=first_byte_ns if first_byte_ns is not None else _first(times),
            end_ns=end_ns if end_ns is not None else _last(times),
            outcome=Outcome(outcome),
            error=error,
            usage=dict(usage) if usage is not None else None,
            token_source=TokenSource(token_source),
            labels=dict(labels or {}),
            started_at=started_at,
            annotations={k: list(v) for k, v in (annotations or {}).items()},
        )

    # -- views ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.times)

    def __repr__(self) -> str:
        return (
            f"Timeline(stream_id={self.stream_id!r}, where={self.where.value!r}, "
            f"events={len(self)}, tokens={self.total_tokens}, outcome={self.outcome.value!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timeline):
            return NotImplemented
        arrays = ("times", "tokens", "wire_bytes", "text_bytes", "kinds")
        scalars = (
            "stream_id",
            "where",
            "texts",
            "header_ns",
            "first_byte_ns",
            "end_ns",
            "outcome",
            "error",
            "usage",
            "token_source",
            "labels",
            "started_at",
            "annotations",
            "meta",
        )
        return all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays) and all(
            getattr(self, s) == getattr(other, s) for s in scalars
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def text_mask(self) -> npt.NDArray[np.bool_]:
        """True for events that carry text the user sees (content, reasoning, tool call).

        An event with text and no token of its own is a piece of a token another event
        counts (docs/format.md#token-counts): the user saw it, so it is a text event.
        """
        return is_text_event(self.kinds, self.tokens, self.text_bytes)

    @property
    def visible_mask(self) -> npt.NDArray[np.bool_]:
        """The text events of the answer itself (content, tool call): reasoning is not one.

        TTFT is taken on the first of these (docs/metrics.md#latency).
        """
        visible: npt.NDArray[np.bool_] = _IS_VISIBLE_KIND[self.kinds.astype(np.uint8, copy=False)]
        return self.text_mask & visible

    @property
    def total_tokens(self) -> int:
        return int(self.tokens[self.text_mask].sum())

    @property
    def text(self) -> str | None:
        """The text the stream delivered, when it was kept."""
        if self.texts is None:
            return None
        mask = self.text_mask
        return "".join(t for t, keep in zip(self.texts, mask, strict=True) if keep)

    def events(self) -> list[Event]:
        """The events as :class:`Event` tuples (texts empty when not kept)."""
        texts = self.texts if self.texts is not None else [""] * len(self)
        return [
            Event(int(t), s, int(n), EventKind(int(k)), int(w))
            for t, s, n, k, w in zip(
                self.times, texts, self.tokens, self.kinds, self.wire_bytes, strict=True
            )
        ]

    def without_text(self) -> Timeline:
        """A copy that keeps no text (what recorders write unless told otherwise)."""
        return self.replace(texts=None)

    def replace(self, **changes: Any) -> Timeline:
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return Timeline(**values)


# -- token counts -----------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Estimate the tokens in ``text`` without a tokenizer (none may be downloaded here).

    English BPE vocabularies average about four characters per token; words are a floor so
    that short pieces count. Used only when the provider reports no usage at all.
    """
    if not text:
        return 0
    return max(len(text.split()), math.ceil(len(text) / 4), 1)


def is_text_kind(kinds: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.bool_]:
    """Which events are of a kind that carries text (a table lookup: ``np.isin`` sorts, and
    its cost showed at every stream's end in the gateway)."""
    if kinds.dtype == np.uint8:
        return _IS_TEXT_KIND[kinds]  # type: ignore[no-any-return]
    return np.isin(kinds, _TEXT_KIND_VALUES)


def is_text_event(
    kinds: npt.NDArray[np.uint8], tokens: npt.ArrayLike, text_bytes: npt.ArrayLike
) -> npt.NDArray[np.bool_]:
    """The text events among parallel event arrays: a text kind with a token or with text."""
    carries = (np.asarray(tokens) > 0) | (np.asarray(text_bytes) > 0)
    return is_text_kind(kinds) & carries


def assign_tokens(
    kinds: npt.NDArray[np.uint8],
    text_bytes: npt.NDArray[np.int32],
    *,
    texts: Sequence[str] | None = None,
    usage_completion_tokens: int | None = None,
    stopped_at_max_tokens: int | None = None,
) -> tuple[npt.NDArray[np.int32], TokenSource]:
    """Token counts per event from what the provider told us (docs/format.md#token-counts).

    The total is the final usage's ``completion_tokens``; with no usage, a stream that ended
    for length (``finish_reason: "length"``) carried exactly the request's ``max_tokens``,
    passed as ``stopped_at_max_tokens``. A total is always kept, and spread over the text
    events by their text:

    - as many tokens as text events: one each;
    - more: each event one, and the rest in proportion to the text, by largest remainder;
    - fewer (a pacer or proxy cut tokens into pieces): each event holds the tokens that
      begin in it, the total laid over the text in order (``ceil(total * bytes before the
      event's end / all bytes)``, less the same before its start). Pieces of one token share
      it: the first piece counts it, the others hold none, and the first event holds one.

    With no total at all, the counts are estimated from the text (or four bytes a token when
    texts are not kept), at least one per text event. The rule that applied is returned.
    """
    text_events = is_text_kind(kinds) & (text_bytes > 0)
    tokens = np.zeros(len(kinds), dtype=np.int32)
    count = int(text_events.sum())
    total, source = usage_completion_tokens, None
    if total is None and stopped_at_max_tokens is not None:
        total, source = stopped_at_max_tokens, TokenSource.MAX_TOKENS
    if count == 0:
        return tokens, TokenSource.EXACT if total is None else (
            source or TokenSource.USAGE_ONE_PER_EVENT
        )
    # A total under one token for visible text says nothing usable: estimate instead.
    if total is not None and total >= 1:
        weights = text_bytes[text_events].astype(np.int64)
        if total == count:
            tokens[text_events] = 1
            return tokens, source or TokenSource.USAGE_ONE_PER_EVENT
        if total > count:
            share = weights / weights.sum() * (total - count)  # each event already holds one
            floor = np.floor(share).astype(np.int32)
            remainder = total - count - int(floor.sum())
            if remainder:
                order = np.argsort(-(share - floor), kind="stable")[:remainder]
                floor[order] += 1
            tokens[text_events] = 1 + floor
            return tokens, source or TokenSource.USAGE_PROPORTIONAL
        # Integer arithmetic: ceil(total * end / all), exact for any stream length.
        ends = np.cumsum(weights)
        begun = -((-total * ends) // int(ends[-1]))
        tokens[text_events] = np.diff(begun, prepend=0).astype(np.int32)
        return tokens, source or TokenSource.USAGE_SHARED
    if texts is not None:
        idx = np.flatnonzero(text_events)
        tokens[idx] = [max(1, estimate_tokens(texts[int(i)])) for i in idx]
    else:
        tokens[text_events] = np.maximum(1, np.ceil(text_bytes[text_events] / 4)).astype(np.int32)
    return tokens, TokenSource.ESTIMATED


def _first(times: Int64Array) -> Nanos | None:
    return int(times[0]) if len(times) else None


def _last(times: Int64Array) -> Nanos | None:
    return int(times[-1]) if len(times) else None
