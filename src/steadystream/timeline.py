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
from dataclasses import InitVar, dataclass, field, fields
from enum import Enum
from typing import Any, TypeVar

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
    "EVENT_ARRAYS",
    "SCHEMA",
    "SKEW_NS",
    "Timeline",
    "assign_tokens",
    "estimate_tokens",
    "event_array",
    "is_text_event",
    "is_text_kind",
]

SCHEMA = "steadystream.timeline/1"

# How far before the request sent a time may lie. No time can be earlier, and writers refuse
# one, but earlier bench versions read the clock after the send returned and could stamp an
# answer's head (a kernel stamp) a few microseconds before it. Files they wrote must still
# read, and whatever a reader returns can be built again.
SKEW_NS = 1_000_000

EVENT_ARRAYS: dict[str, np.dtype[Any]] = {  # (numpy keeps one object per dtype: `is` tests)
    "times": np.dtype(np.int64),
    "tokens": np.dtype(np.int32),
    "wire_bytes": np.dtype(np.int32),
    "text_bytes": np.dtype(np.int32),
    "kinds": np.dtype(np.uint8),
}
"""The parallel event arrays of a :class:`Timeline`, and the dtype each holds."""

_INT64 = EVENT_ARRAYS["times"]
_INT64_LIMIT = 2**63
_INT32_MAX = 2**31 - 1
_KIND_VALUES = frozenset(int(k) for k in EventKind)
_E = TypeVar("_E", bound=Enum)

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

    _checked: InitVar[bool] = False

    def __post_init__(self, _checked: bool) -> None:
        # Cheap where the values already are what they should be (as producers' are): a type
        # test each, and one vectorised pass over ``times``. Construction is on hot paths: a
        # file reader builds a timeline a line, after checking every field of a whole block
        # of lines at once (files/_blocks.py), and passes ``_checked`` not to check twice.
        if _checked:
            return
        if type(self.where) is not Where:
            self.where = _member(Where, self.where, "where")
        if type(self.outcome) is not Outcome:
            self.outcome = _member(Outcome, self.outcome, "outcome")
        if type(self.token_source) is not TokenSource:
            self.token_source = _member(TokenSource, self.token_source, "token_source")
        if type(self.stream_id) is not str:
            raise ValueError(f"stream_id must be a string, not {type(self.stream_id).__name__}")
        for name in ("header_ns", "first_byte_ns", "end_ns"):
            value = getattr(self, name)
            if value is not None and not (type(value) is int and 0 <= value < _INT64_LIMIT):
                setattr(self, name, _nanos(value, name))
        if self.started_at is not None and type(self.started_at) is not float:
            self.started_at = _seconds(self.started_at)
        times = self.times
        if not (type(times) is np.ndarray and times.dtype is _INT64 and times.ndim == 1):
            self.times = times = event_array(times, "times")
        n = len(times)
        for name in ("tokens", "wire_bytes", "text_bytes", "kinds"):
            array = getattr(self, name)
            if not (
                type(array) is np.ndarray and array.dtype is EVENT_ARRAYS[name] and array.ndim == 1
            ):
                setattr(self, name, array := event_array(array, name))
            if len(array) != n:
                raise ValueError(f"{name} has {len(array)} entries, times has {n}")
        if self.texts is not None and len(self.texts) != n:
            raise ValueError(f"texts has {len(self.texts)} entries, times has {n}")
        for name, notes in self.annotations.items():
            if len(notes) != n:
                raise ValueError(f"annotation {name!r} has {len(notes)} entries, times has {n}")
        if n:
            fault = times_fault(times)
            if fault is not None:
                raise ValueError(fault)

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

        Each event is checked: an integer time in nanoseconds (a float is refused, not
        truncated), a string of text, a count of tokens from 0, a known :class:`EventKind`.
        ``first_byte_ns`` defaults to the first event's time and ``end_ns`` to the last's.
        """
        rows = [_event(index, e) for index, e in enumerate(events)]
        count = len(rows)
        times = np.fromiter((e.time_ns for e in rows), dtype=np.int64, count=count)
        text_bytes = np.fromiter(
            (_utf8_size(i, e.text) for i, e in enumerate(rows)), np.int32, count
        )
        for name, notes in (annotations or {}).items():
            if isinstance(notes, str):  # a string is a sequence too: of letters, not labels
                raise ValueError(f"annotation {name!r} must be a list of labels, not a string")
        return cls(
            stream_id=stream_id,
            where=where,  # type: ignore[arg-type]  # (the constructor takes the value)
            times=times,
            tokens=np.fromiter((e.tokens for e in rows), dtype=np.int32, count=count),
            wire_bytes=np.fromiter((e.wire_bytes or 0 for e in rows), dtype=np.int32, count=count),
            text_bytes=text_bytes,
            kinds=np.fromiter((e.kind for e in rows), dtype=np.uint8, count=count),
            texts=[e.text for e in rows] if keep_text else None,
            header_ns=header_ns,
            first_byte_ns=first_byte_ns if first_byte_ns is not None else _first(times),
            end_ns=end_ns if end_ns is not None else _last(times),
            outcome=outcome,  # type: ignore[arg-type]
            error=error,
            usage=dict(usage) if usage is not None else None,
            token_source=token_source,  # type: ignore[arg-type]
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
            _same(getattr(self, s), getattr(other, s)) for s in scalars
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
        """A copy with ``changes``, checked as a new timeline is."""
        values = {name: getattr(self, name) for name in _FIELD_NAMES}
        values.update(changes)
        return Timeline(**values)


_FIELD_NAMES = tuple(f.name for f in fields(Timeline))


# -- checks -----------------------------------------------------------------------------------


def event_array(value: Any, name: str) -> npt.NDArray[Any]:
    """``value`` as the event array ``name`` (1-D, of its dtype in :data:`EVENT_ARRAYS`).

    Only integers are taken, and only ones the dtype holds: a float array is refused, not
    truncated, and a value out of range is refused, not wrapped. ValueError names the array.
    An array that already is one is returned as it is.
    """
    dtype = EVENT_ARRAYS[name]
    if type(value) is np.ndarray and value.dtype == dtype and value.ndim == 1:
        return value
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # a ragged list, for one
        raise ValueError(f"{name} must be a 1-D array of integers ({exc})") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integers, not {array.ndim}-D")
    if array.size == 0:
        return np.empty(0, dtype)  # np.asarray([]) is float64: nothing to refuse
    if array.dtype.kind not in "iu":  # bool, float, object (ints past 64 bits), str
        raise ValueError(f"{name} must hold integers, not {array.dtype} values")
    if not np.can_cast(array.dtype, dtype):
        info = np.iinfo(dtype)
        least, most = int(array.min()), int(array.max())
        if least < info.min or most > info.max:
            bad = least if least < info.min else most
            raise ValueError(f"{name} holds {bad}, which {dtype} cannot ({info.min} to {info.max})")
    return array.astype(dtype, copy=False)


def times_fault(times: Int64Array) -> str | None:
    """What is wrong with one stream's times (they decrease, or begin before ``-SKEW_NS``)."""
    if len(times) > 1:
        back = times[1:] < times[:-1]
        if np.count_nonzero(back):  # (twice as fast as any() on a short stream's times)
            at = int(np.argmax(back)) + 1
            return (
                f"times must not decrease: event {at} at {times[at]} ns follows {times[at - 1]} ns"
            )
    if len(times) and times[0] < -SKEW_NS:  # (times do not decrease: the first is the least)
        return (
            f"times must not be before the request was sent (-{SKEW_NS} ns at the most, for "
            f"clock skew): event 0 at {times[0]} ns"
        )
    return None


def _member(kind: type[_E], value: Any, name: str) -> _E:
    try:
        return kind(value)
    except (ValueError, TypeError):
        choices = ", ".join(str(m.value) for m in kind)
        raise ValueError(f"{name} must be one of {choices}; got {value!r}") from None


def _nanos(value: Any, name: str) -> int:
    """An integer of nanoseconds, from -SKEW_NS to below 2**63; bool and float refused."""
    if type(value) is not int and (not isinstance(value, np.integer) or isinstance(value, bool)):
        raise ValueError(f"{name} must be an integer of nanoseconds or None, not {value!r}")
    ns = int(value)
    if not -SKEW_NS <= ns < _INT64_LIMIT:
        raise ValueError(
            f"{name} must be from -{SKEW_NS} (clock skew) to below 2**63 nanoseconds after the "
            f"request was sent; got {ns}"
        )
    return ns


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"started_at must be a number of Unix seconds or None, not {value!r}")
    return float(value)


def _event(index: int, values: Any) -> Event:
    """One event, checked; ValueError names its index and field."""
    try:
        event = Event(*values)
    except TypeError:
        raise ValueError(
            f"event {index}: expected (time_ns, text, tokens[, kind[, wire_bytes]]), got {values!r}"
        ) from None
    time_ns, text, tokens, kind, wire_bytes = event
    if (
        type(time_ns) is int
        and -_INT64_LIMIT <= time_ns < _INT64_LIMIT
        and type(text) is str
        and type(tokens) is int
        and 0 <= tokens <= _INT32_MAX
        and (type(kind) is EventKind or (type(kind) is int and kind in _KIND_VALUES))
        and (wire_bytes is None or (type(wire_bytes) is int and 0 <= wire_bytes <= _INT32_MAX))
    ):
        return event
    # Slow path: numpy integers are taken as ints; anything else is named.
    time_ns = _event_int(index, "time_ns", time_ns, -_INT64_LIMIT, _INT64_LIMIT - 1)
    tokens = _event_int(index, "tokens", tokens, 0, _INT32_MAX)
    if wire_bytes is not None:
        wire_bytes = _event_int(index, "wire_bytes", wire_bytes, 0, _INT32_MAX)
    if type(text) is not str:
        raise ValueError(f"event {index}: text must be a string, not {type(text).__name__}")
    if isinstance(kind, bool) or not isinstance(kind, int | np.integer) or kind not in _KIND_VALUES:
        known = ", ".join(f"{int(k)} ({k.name.lower()})" for k in EventKind)
        raise ValueError(f"event {index}: kind must be an EventKind ({known}); got {kind!r}")
    return Event(time_ns, text, tokens, EventKind(int(kind)), wire_bytes)


def _event_int(index: int, name: str, value: Any, least: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        unit = " of nanoseconds (a float is refused, not truncated)" if name == "time_ns" else ""
        raise ValueError(f"event {index}: {name} must be an integer{unit}, not {value!r}")
    if not least <= value <= most:
        raise ValueError(f"event {index}: {name} must be from {least} to {most}; got {value}")
    return int(value)


def _utf8_size(index: int, text: str) -> int:
    try:
        return len(text.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate
        raise ValueError(f"event {index}: text is not valid Unicode ({exc.reason})") from None


def _same(a: Any, b: Any) -> bool:
    """Equality that holds numpy arrays (in ``meta``), at any depth, as values."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            return bool(np.array_equal(a, b))
        except (ValueError, TypeError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        return False


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


MOST_TOKENS_PER_EVENT = 1 << 16
"""The most tokens a total may give a text event on average (the peers' importers' bound
per timed chunk): a usage past it is no count of these events."""


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
    passed as ``stopped_at_max_tokens``. A total is kept (unless it is past
    :data:`MOST_TOKENS_PER_EVENT` an event: then it is no count, and the text is estimated),
    and spread over the text events by their text:

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
    # A total under one token for visible text says nothing usable, nor one past what the
    # events could hold (a usage of 2**40 tokens over five events would not fit the int32
    # counts, and no stream sends that much in an event): estimate instead.
    if total is not None and 1 <= total <= count * MOST_TOKENS_PER_EVENT:
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
