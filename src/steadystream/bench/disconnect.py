"""Readers who drop and come back: ``bench --disconnect after=40tok,back=2s,share=0.25``.

A person on a phone that changes networks, or a laptop that wakes from sleep, loses the
connection mid-answer and asks again. Against a gateway that keeps streams (docs/gateway.md,
"Resume"), the client comes back with ``GET /v1/streams/{id}`` and ``Last-Event-ID`` and
should get every event after the last one it saw, none twice, none lost.

``--disconnect`` drops ``share`` of the streams (seeded per request, like ``--cancel``) after
their ``after``-th content chunk (or that long after sending) and comes back ``back`` later.
Each stream chosen carries its plan in ``meta["disconnect"]``, so one that ends before its
drop point is still seen to have been chosen. Each reconnect goes into the stream's timeline
(``meta["reconnects"]``): when it dropped, when it asked again, when the first event after
it came, and what came back lost or doubled (event ids are the gateway's sequence numbers).
``analyze`` reports the gap the user felt across each one, and how many chosen streams
never dropped (:func:`reconnect_summary`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np

from steadystream._clock import NS_PER_MS
from steadystream._exceptions import SpecError, TimelineFormatError
from steadystream._types import Outcome
from steadystream.bench.cancel import CancelPoint, parse_wait
from steadystream.protocol import SseItem
from steadystream.timeline import Timeline

__all__ = [
    "STREAM_ID_HEADER",
    "DisconnectPlan",
    "DisconnectPolicy",
    "EventIds",
    "Reconnect",
    "ReconnectSummary",
    "id_problem",
    "reconnect_summary",
    "resume_headers",
    "resume_path",
]

STREAM_ID_HEADER = "x-steadystream-stream-id"  # the gateway names each kept stream
_DEFAULT_BACK_NS = 2_000 * NS_PER_MS
_KEYS = ("after", "back", "share")
_EXAMPLE = "example: after=40tok,back=2s,share=0.25"
_MAX_SPEC_CHARS = 200
# A stream's id and its events' ids go back to the server (in the path, in Last-Event-ID) and
# the last event's into the record: a gateway's are a uuid's hex and a sequence number.
_MAX_ID_CHARS = 1024
_MAX_GAPS = 1000


@dataclass(frozen=True, slots=True)
class DisconnectPlan:
    """Where one stream drops (a cancel point) and how long its reader stays away."""

    after: CancelPoint
    back_ns: int

    def describe(self) -> str:
        return f"after {self.after.describe()}, back {self.back_ns / NS_PER_MS:g}ms"


@dataclass(frozen=True, slots=True)
class DisconnectPolicy:
    """Drop ``share`` of the streams at ``plan``; which ones is seeded per request."""

    plan: DisconnectPlan
    share: float = 1.0
    seed: int = 0

    @classmethod
    def parse(cls, text: str, *, seed: int = 0) -> DisconnectPolicy:
        """``after=40tok,back=2s,share=0.25`` (``back`` 2 s and ``share`` 1 by default)."""
        if len(text) > _MAX_SPEC_CHARS:
            raise SpecError(
                f"--disconnect: the spec is {len(text)} characters long; it is a few keys"
                f" ({_EXAMPLE})"
            )
        if not text.strip():
            raise SpecError(f"--disconnect: empty; say when to drop ({_EXAMPLE})")
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not part.strip():
                raise SpecError(f"--disconnect: an empty field in {text!r} ({_EXAMPLE})")
            if not sep or not value:
                raise SpecError(f"--disconnect: {part.strip()!r} is not key=value ({_EXAMPLE})")
            if key not in _KEYS:
                raise SpecError(
                    f"--disconnect: unknown key {key!r}; the keys are {', '.join(_KEYS)}"
                )
            if key in fields:
                raise SpecError(f"--disconnect: {key!r} given twice")
            fields[key] = value
        if "after" not in fields:
            raise SpecError("--disconnect: say when to drop, e.g. after=40tok or after=1.5s")
        after = CancelPoint.parse(fields["after"], option="--disconnect", key="after")
        back_ns = _DEFAULT_BACK_NS
        if "back" in fields:
            back_ns = parse_wait(fields["back"], option="--disconnect", key="back")
        share = 1.0
        if "share" in fields:
            share = _share(fields["share"])
        return cls(DisconnectPlan(after, back_ns), share, seed)

    def for_request(self, index: int) -> DisconnectPlan | None:
        draw = np.random.default_rng([self.seed, index, 0xD15C]).random()
        return self.plan if draw < self.share else None


def _share(value: str) -> float:
    try:
        share = float(value) if value.isascii() and "_" not in value else float("nan")
    except ValueError:
        share = float("nan")
    if not 0.0 <= share <= 1.0:  # (NaN fails too)
        raise SpecError(
            f"--disconnect: share={value!r} must be a fraction from 0 to 1 (0.25: one in four)"
        )
    return share


def id_problem(value: str, what: str, *, header: bool = True) -> str | None:
    """Why an id the server gave cannot go back to it, or None: a long one, and for a
    ``header`` (Last-Event-ID) one that is not printable ASCII."""
    if len(value) > _MAX_ID_CHARS:
        return f"{what} is {len(value):,} characters long (at most {_MAX_ID_CHARS:,})"
    if header and not (value.isascii() and value.isprintable()):
        return f"{what} holds characters a header cannot carry (printable ASCII only)"
    return None


def resume_path(request_path: str, api_path: str, stream_id: str) -> str:
    """The kept stream's path beside the request's: ``/v1/chat/completions`` -> ``/v1/streams/ID``.

    ``request_path`` is what the stream was asked on, ``api_path`` its API's part of it
    (``chat/completions``); whatever prefix the gateway is served under is kept.
    """
    path = request_path.split("?", 1)[0]
    base = path[: -len(api_path)] if api_path and path.endswith(api_path) else path
    if not base.endswith("/"):
        base += "/"
    return f"{base}streams/{quote(stream_id, safe='')}"


@dataclass(slots=True)
class Reconnect:
    """One drop and its return, in ns from the request sent (``None``: did not happen)."""

    dropped_ns: int
    last_event_id: str | None  # what the client had seen, sent as Last-Event-ID
    asked_ns: int | None = None  # the resume request's last byte sent
    first_ns: int | None = None  # the first event after it
    status: int | None = None
    replayed: int = 0  # events received after the return
    lost: int = 0  # ids skipped (numeric ids only)
    doubled: int = 0  # ids at or below one already seen
    error: str | None = None
    interrupted: bool = False  # the run ended before the return was made or read

    def as_meta(self) -> dict[str, Any]:
        def ms(ns: int | None) -> float | None:
            return None if ns is None else round(ns / NS_PER_MS, 3)

        meta: dict[str, Any] = {
            "dropped_ms": ms(self.dropped_ns),
            "asked_ms": ms(self.asked_ns),
            "first_ms": ms(self.first_ns),
            "last_event_id": _shown_id(self.last_event_id),
            "status": self.status,
            "events_after": self.replayed,
            "lost": self.lost,
            "doubled": self.doubled,
        }
        if self.error is not None:
            meta["error"] = self.error
        if self.interrupted:
            meta["interrupted"] = True
        return meta


def _shown_id(event_id: str | None) -> str | None:
    """An id as the record keeps it: one past any gateway's length is cut (its reconnect's
    error says so), or every record would hold what a hostile server made up."""
    if event_id is None or len(event_id) <= _MAX_ID_CHARS:
        return event_id
    return event_id[: _MAX_ID_CHARS - 3] + "..."


@dataclass(slots=True)
class EventIds:
    """The ids a stream's events carried, to say what a return lost or doubled.

    Ids are opaque to a client in general; the gateway's are decimal sequence numbers, rising
    by one, so a jump is events lost and an id at or below the highest seen is an event
    doubled, unless it is one a jump skipped: that one came late, and is no longer lost.
    Other ids are not judged.
    """

    last: str | None = None
    seen: int = 0
    lost: int = 0
    doubled: int = 0
    _high: int | None = None
    _numeric: bool = True
    # The ids jumps skipped, as (first, last) ranges, lowest first; the oldest go past
    # _MAX_GAPS (a server that skips that often: its late events then count as doubled).
    _gaps: list[tuple[int, int]] = field(default_factory=list)
    # The connection's last event, its id and data: an event with no id: line of its own
    # carries the last id over (SSE's last event id), as the gateway's closing in-band error
    # does. The same id on other data is that; on the same data, an event sent twice.
    _previous: tuple[str, str] | None = None

    @property
    def numbered(self) -> bool:
        """Whether the events so far carried the gateway's numbers."""
        return self._numeric and self._high is not None

    def reconnected(self) -> None:
        """A new connection: its events carry no id over from the last one's."""
        self._previous = None

    def see(self, items: Iterable[SseItem]) -> None:
        """Take the events of one read."""
        for item in items:
            event_id = getattr(item, "id", None)
            if event_id is None:
                continue
            previous, self._previous = self._previous, (event_id, getattr(item, "data", ""))
            if previous is not None and previous[0] == event_id and previous != self._previous:
                continue  # (an id carried over, not an event of its own)
            self.seen += 1
            self.last = event_id
            if not (
                self._numeric
                and event_id.isascii()
                and event_id.isdecimal()
                and len(event_id) <= 18
            ):
                self._numeric = False
                continue
            number, high = int(event_id), self._high
            if high is not None and number <= high:
                if self._came_late(number):
                    self.lost -= 1
                else:
                    self.doubled += 1
                continue
            if high is not None and number > high + 1:
                self.lost += number - high - 1
                self._gaps.append((high + 1, number - 1))
                if len(self._gaps) > _MAX_GAPS:
                    del self._gaps[0]
            self._high = number

    def _came_late(self, number: int) -> bool:
        """Whether ``number`` is one a jump skipped; if so it is taken out of its gap."""
        gaps = self._gaps
        at = bisect.bisect_right(gaps, (number, math.inf)) - 1
        if at < 0 or gaps[at][1] < number:
            return False
        first, last = gaps[at]
        gaps[at : at + 1] = [
            gap for gap in ((first, number - 1), (number + 1, last)) if gap[0] <= gap[1]
        ]
        return True


@dataclass(frozen=True, slots=True)
class ReconnectSummary:
    """What the readers who came back felt, over a run (``analyze``)."""

    streams: int  # streams with at least one reconnect
    reconnects: int
    failed: int  # returns that got no stream back (410, an error)
    lost: int
    doubled: int
    felt_gap_ms: tuple[float, ...]  # per return: last text before the drop to the first after
    ended_before_drop: int = 0  # streams chosen for a drop (meta "disconnect") never dropped
    interrupted: int = 0  # drops whose return the run's end cut short (not judged)

    @property
    def worst_felt_ms(self) -> float | None:
        return max(self.felt_gap_ms) if self.felt_gap_ms else None

    @property
    def median_felt_ms(self) -> float | None:
        return float(np.median(self.felt_gap_ms)) if self.felt_gap_ms else None


def reconnect_summary(timelines: Iterable[Timeline]) -> ReconnectSummary | None:
    """Each reconnect's felt gap and losses, and how many streams chosen for a drop ended
    before their drop point; None when no stream was chosen or reconnected.

    Entries are read as bench writes them (:meth:`Reconnect.as_meta`). A field of the wrong
    type raises :class:`TimelineFormatError` naming it: ``lost: "2"`` read as nothing lost
    would hide a loss. A return counts as not resumed when it got no stream back (an error,
    an error status, no event) or when the stream after it did not end whole.
    """
    streams = reconnects = failed = lost = doubled = ended_first = interrupted = 0
    felt: list[float] = []
    for timeline in timelines:
        entries = _entries(timeline)
        if not entries:
            # (bench writes "disconnect" on every stream it chose, dropped or not; one that
            # failed before its drop point did not end before it: it failed, said elsewhere)
            chosen = timeline.meta.get("disconnect") is not None
            ended_first += chosen and timeline.outcome is Outcome.COMPLETE
            continue
        text_times = timeline.times[timeline.text_mask]
        counted = False
        for index, entry in enumerate(entries):
            if entry.get("interrupted"):
                interrupted += 1  # (no return to judge: the run ended first)
                continue
            counted = True
            reconnects += 1
            lost += entry.get("lost") or 0
            doubled += entry.get("doubled") or 0
            status = entry.get("status")
            if (
                entry.get("error") is not None
                or entry.get("first_ms") is None
                or (status is not None and not 200 <= status < 300)
                # (a record made before the return's failure was written into its entry)
                or (index == len(entries) - 1 and timeline.outcome in _NOT_WHOLE)
            ):
                failed += 1
            gap = _felt_gap_ms(text_times, entry)
            if gap is not None:
                felt.append(gap)
        streams += counted
    if not reconnects and not ended_first and not interrupted:
        return None
    return ReconnectSummary(
        streams, reconnects, failed, lost, doubled, tuple(felt), ended_first, interrupted
    )


def _felt_gap_ms(text_times: np.ndarray, entry: Mapping[str, Any]) -> float | None:
    """From the last text before the drop (or the request, if none had come) to the first
    text after the return; None when no text came after it."""
    dropped = entry.get("dropped_ms")
    if dropped is None or entry.get("first_ms") is None:
        return None
    at = round(dropped * NS_PER_MS)
    cut = int(np.searchsorted(text_times, at, side="right"))
    if cut >= len(text_times):
        return None
    before = int(text_times[cut - 1]) if cut else 0
    return round((int(text_times[cut]) - before) / NS_PER_MS, 3)


def _entries(timeline: Timeline) -> list[Mapping[str, Any]]:
    """The stream's reconnect entries, each field checked for its type."""
    entries = timeline.meta.get("reconnects")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise _bad(timeline, "meta.reconnects", entries, "a list of reconnects")
    end_ms = math.inf if timeline.end_ns is None else timeline.end_ns / NS_PER_MS + _ROUNDING_MS
    back_ms = 0.0  # where the last return began: a drop comes after it
    for index, entry in enumerate(entries):
        where = f"meta.reconnects[{index}]"
        if not isinstance(entry, Mapping):
            raise _bad(timeline, where, entry, "a reconnect (an object)")
        for key, (accepts, what) in _FIELDS.items():
            value = entry.get(key)
            if value is not None and not accepts(value):
                raise _bad(timeline, f"{where}.{key}", value, what)
        # In time: each drop within the stream and after the last return, its return
        # asked after it and its first event after it, or each gap felt would be made up.
        dropped = entry.get("dropped_ms")
        if dropped is None:
            raise _bad(timeline, f"{where}.dropped_ms", dropped, "a time in ms")
        if not back_ms - _ROUNDING_MS <= dropped <= end_ms:
            raise _bad(
                timeline,
                f"{where}.dropped_ms",
                dropped,
                f"a time from the last return's ({back_ms:g} ms) to the stream's end",
            )
        asked, first = entry.get("asked_ms"), entry.get("first_ms")
        if asked is not None and asked < dropped - _ROUNDING_MS:
            raise _bad(timeline, f"{where}.asked_ms", asked, "a time after its drop")
        if first is not None and not dropped - _ROUNDING_MS <= first <= end_ms:
            raise _bad(
                timeline, f"{where}.first_ms", first, "a time from its drop to the stream's end"
            )
        back_ms = first or asked or dropped
    return entries


def _bad(timeline: Timeline, field: str, value: object, what: str) -> TimelineFormatError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return TimelineFormatError(
        f"stream {timeline.stream_id!r}: a reconnect field is {shown}, not {what}", field=field
    )


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_status(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599


# Bench writes its times in ms to three places, and a kernel's stamp of an answer (a first
# event, the end) can come a little before the clock read after its request's send returned
# (asked_ms): times are compared this loosely, and asked_ms only with its drop (one clock).
_ROUNDING_MS = 1.0

_FIELDS: dict[str, tuple[Callable[[object], bool], str]] = {
    "dropped_ms": (_is_time, "a time in ms"),
    "asked_ms": (_is_time, "a time in ms or null"),
    "first_ms": (_is_time, "a time in ms or null"),
    "status": (_is_status, "an HTTP status or null"),
    "events_after": (_is_count, "a count (0 or more)"),
    "lost": (_is_count, "a count (0 or more)"),
    "doubled": (_is_count, "a count (0 or more)"),
    "last_event_id": (lambda value: isinstance(value, str), "an event id (text) or null"),
    "error": (lambda value: isinstance(value, str), "a message (text) or null"),
    "interrupted": (lambda value: isinstance(value, bool), "true, false or null"),
}
_NOT_WHOLE = (Outcome.ERROR, Outcome.TRUNCATED)


def resume_headers(headers: Mapping[str, str], last_event_id: str | None) -> dict[str, str]:
    """The resume request's headers: the stream's own, without a body's, plus Last-Event-ID."""
    kept = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if last_event_id is not None:
        kept["Last-Event-ID"] = last_event_id
    return kept
