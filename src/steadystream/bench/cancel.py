"""Cancellation: which streams the client walks away from, and what the engine did about it.

``--cancel 0.2 --cancel-after 20tok`` closes the connection of one stream in five after its
20th content chunk (``500ms``: that long after the request was sent). The choice is seeded
per request, so a rerun cancels the same requests at the same points. A point is read here
for ``--disconnect after=`` too (:meth:`CancelPoint.parse`), with the same bounds: ASCII
only, a unit always (a bare ``20`` could be chunks or seconds), at most an hour or
10,000,000 chunks.

Against the lab, :func:`fetch_cancel_truth` reads ``GET /lab/requests/{id}`` once the engine
is done with a cancelled request and adds to the client timeline's ``meta``:

- ``lab_disconnect_noticed_ms``, ``lab_kv_freed_ms``: when the engine noticed and when it
  freed the sequence's KV cache, in ms from the request's arrival at the lab;
- ``cancel_latency_ms``: from the client closing the connection to the KV freed (the time an
  engine keeps paying for an answer nobody reads);
- ``tokens_after_disconnect``: tokens generated after the client left (the cancellation tax).

The client's times count from request sent, the lab's from request arrived (the difference
is the connection set-up and the request's transit). The two are aligned on the content
events both sides saw: the smallest arrival-minus-write difference is the offset between the
origins plus the fastest loopback transit, tens of microseconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np
import orjson

from steadystream._clock import NS_PER_MS, Clock
from steadystream._exceptions import SpecError
from steadystream._transport_errors import TRANSPORT_ERRORS
from steadystream._types import Outcome
from steadystream._units import parse_duration
from steadystream.timeline import Timeline

__all__ = [
    "CancelPoint",
    "CancelPolicy",
    "CancellationStats",
    "LabTruthClient",
    "Spread",
    "cancellation_stats",
    "fetch_cancel_truth",
]

_TOKENS = re.compile(r"^\s*([0-9]+)\s*(tok|tokens?)\s*$", re.IGNORECASE)
_BARE = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*$")
_POINT_EXAMPLES = "examples: 20tok, 500ms, 1.5s"
_MAX_CHARS = 40  # a point or a wait is a few characters; a longer one is not echoed
MAX_AFTER_TOKENS = 10_000_000
MAX_WAIT_NS = 3_600_000 * NS_PER_MS  # an hour: longer than any stream is worth a wait
_POLL_NS = 20 * NS_PER_MS


@dataclass(frozen=True, slots=True)
class CancelPoint:
    """When to close one stream: after this many content chunks, or this long after sending."""

    after_tokens: int | None = None
    after_ns: int | None = None

    @classmethod
    def parse(cls, text: str, *, option: str = "--cancel-after", key: str = "") -> CancelPoint:
        """``20tok`` (content chunks) or ``500ms`` (after sending); a bare number is neither.

        Errors are one line naming ``option`` (and ``key``, for a field of a spec).
        """
        shown = _shown(text, option, key)
        if text.isascii() and _BARE.match(text):
            number = text.strip()
            chunks = f"{number}tok (content chunks) or " if number.isdigit() else ""
            raise SpecError(f"{option}: {shown} needs a unit: {chunks}{number}s (after sending)")
        if text.isascii() and (match := _TOKENS.match(text)):
            tokens = int(match[1])  # (a few digits: _shown refused a long text)
            if tokens > MAX_AFTER_TOKENS:
                raise SpecError(
                    f"{option}: {shown} is past any answer (at most {MAX_AFTER_TOKENS:,} chunks)"
                )
            return cls(after_tokens=tokens)
        try:
            ns = parse_duration(text, name=option) if text.isascii() else None
        except SpecError:
            ns = None
        if ns is None:
            raise SpecError(f"{option}: {shown} is not a point ({_POINT_EXAMPLES})")
        return cls(after_ns=_at_most_an_hour(ns, option, shown))

    def describe(self) -> str:
        if self.after_tokens is not None:
            return f"{self.after_tokens} tokens"
        return f"{(self.after_ns or 0) / NS_PER_MS:g}ms"


def parse_wait(text: str, *, option: str, key: str = "") -> int:
    """A wait in ns, from 0 to an hour (a bare number is seconds); ASCII only."""
    shown = _shown(text, option, key)
    if not text.isascii():
        raise SpecError(f"{option}: {shown} is not a duration (examples: 2s, 500ms)")
    ns = parse_duration(text, name=f"{option} {key}" if key else option)
    return _at_most_an_hour(ns, option, shown)


def _shown(text: str, option: str, key: str) -> str:
    """The value as a message quotes it (``after='40'``); a long one is refused unquoted."""
    if len(text) > _MAX_CHARS:
        what = f"{key}=..." if key else "the value"
        raise SpecError(f"{option}: {what} is {len(text)} characters long (at most {_MAX_CHARS})")
    return f"{key}={text!r}" if key else repr(text)


def _at_most_an_hour(ns: int, option: str, shown: str) -> int:
    if ns > MAX_WAIT_NS:
        raise SpecError(f"{option}: {shown} is longer than an hour")
    return ns


@dataclass(frozen=True, slots=True)
class CancelPolicy:
    """Cancel ``fraction`` of the streams at ``point``; which ones is seeded per request."""

    fraction: float
    point: CancelPoint
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction <= 1.0:
            raise SpecError(f"--cancel must be a fraction between 0 and 1, got {self.fraction}")

    def for_request(self, index: int) -> CancelPoint | None:
        draw = np.random.default_rng([self.seed, index, 0xCA]).random()
        return self.point if draw < self.fraction else None


class LabTruthClient:
    """Fetches cancellation ground truth from a lab, if the server is one.

    ``mode``: ``on`` always asks, ``off`` never, ``auto`` asks until the server shows it
    is not a lab (its first answer is not a ground-truth record).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        origin: str,
        clock: Clock,
        *,
        mode: str = "auto",
        timeout_ns: int = 5_000 * NS_PER_MS,
    ) -> None:
        if mode not in ("auto", "on", "off"):
            raise SpecError(f"--lab-truth must be auto, on or off, got {mode!r}")
        self.session = session
        self.origin = origin.rstrip("/")
        self.clock = clock
        self.mode = mode
        self.timeout_ns = timeout_ns
        self.confirmed = False  # the server answered with a ground-truth record once
        self.unavailable: str | None = None  # why not, once known

    @property
    def enabled(self) -> bool:
        return self.mode == "on" or (self.mode == "auto" and self.unavailable is None)

    async def record(self, request_id: str) -> dict[str, Any] | None:
        """The lab's record of a request once the engine is done with it (None: unknown)."""
        deadline = self.clock.now_ns() + self.timeout_ns
        url = f"{self.origin}/lab/requests/{request_id}"
        last: dict[str, Any] | None = None
        while True:
            last = await self._get(url)
            if last is None:
                return None
            if last.get("kv_freed_ns") is not None or last.get("done"):
                return last
            now = self.clock.now_ns()
            if now >= deadline:
                return last
            await self.clock.sleep_until(min(now + _POLL_NS, deadline))

    async def _get(self, url: str) -> dict[str, Any] | None:
        try:
            async with self.session.get(url) as resp:
                body = await resp.read()
                status = resp.status
        except TRANSPORT_ERRORS as exc:
            self._fail(f"cannot reach {url}: {exc.__class__.__name__}")
            return None
        record: Any = None
        if status == 200:
            try:
                record = orjson.loads(body)
            except orjson.JSONDecodeError:
                record = None
        if isinstance(record, dict) and "request_id" in record:
            self.confirmed = True
            return record
        self._fail(f"{url} answered HTTP {status} without a ground-truth record")
        return None

    def _fail(self, why: str) -> None:
        if not self.confirmed and self.mode == "auto":
            self.unavailable = why


async def fetch_cancel_truth(truth: LabTruthClient, timeline: Timeline) -> None:
    """Add the lab's view of a cancelled stream to ``timeline.meta`` (see the module doc)."""
    record = await truth.record(timeline.stream_id)
    if record is None:
        return
    meta = timeline.meta

    def ms(key: str) -> float | None:
        value = record.get(key)
        return None if not isinstance(value, int) else value / NS_PER_MS

    noticed, freed = ms("disconnect_noticed_ns"), ms("kv_freed_ns")
    meta["lab_disconnect_noticed_ms"] = noticed
    meta["lab_kv_freed_ms"] = freed
    meta["tokens_after_disconnect"] = record.get("tokens_after_disconnect")
    meta["lab_finish_reason"] = record.get("finish_reason")
    if timeline.end_ns is None:
        return
    at_ms = (timeline.end_ns - _origin_offset(timeline, record)) / NS_PER_MS
    meta["cancel_notice_ms"] = None if noticed is None else noticed - at_ms
    meta["cancel_latency_ms"] = None if freed is None else freed - at_ms


def _origin_offset(timeline: Timeline, record: dict[str, Any]) -> int:
    """Client time minus lab time for the same instant, from the events both saw.

    The client counts from request sent, the lab from request arrived; with user stamps the
    smallest difference between an event's arrival and its write is that offset plus the
    fastest transit (tens of microseconds on loopback), with kernel stamps the median is.
    With no event seen, 0.
    """
    events = record.get("events")
    if not isinstance(events, list):
        return 0
    written = [
        e["written_ns"]
        for e in events
        if isinstance(e, dict) and e.get("tokens") and isinstance(e.get("written_ns"), int)
    ]
    seen = timeline.times[timeline.text_mask]
    n = min(len(written), len(seen))
    if n == 0:
        return 0
    differences = seen[:n] - np.asarray(written[:n], dtype=np.int64)
    if timeline.meta.get("stamps") == "kernel":
        # Kernel stamps are the arrivals; the lab's stamp is taken after its send returns,
        # and one write whose stamp came late (the lab descheduled) would drag the smallest
        # difference below the offset. The median holds.
        return int(np.median(differences))
    return int(differences.min())


@dataclass(frozen=True, slots=True)
class Spread:
    """How many values there were, and their median, 95th percentile and maximum."""

    count: int
    p50: float
    p95: float
    max: float


@dataclass(frozen=True, slots=True)
class CancellationStats:
    """What cancelling cost: the streams the client left, and what the engine did after."""

    cancelled: int
    latency_ms: Spread | None  # client left -> engine freed the KV (needs a lab)
    notice_ms: Spread | None  # client left -> engine noticed (needs a lab)
    tax_tokens: Spread | None  # tokens generated after the client left (needs a lab)


def cancellation_stats(timelines: Sequence[Timeline]) -> CancellationStats | None:
    """The streams bench cancelled (``--cancel``) and the ground truth on them; None: none."""
    cancelled = [
        t
        for t in timelines
        if t.outcome is Outcome.CANCELLED and t.meta.get("cancel_after") is not None
    ]
    if not cancelled:
        return None
    return CancellationStats(
        cancelled=len(cancelled),
        latency_ms=_spread(cancelled, "cancel_latency_ms"),
        notice_ms=_spread(cancelled, "cancel_notice_ms"),
        tax_tokens=_spread(cancelled, "tokens_after_disconnect"),
    )


def _spread(timelines: Sequence[Timeline], key: str) -> Spread | None:
    found = [t.meta.get(key) for t in timelines]
    values = np.array([v for v in found if isinstance(v, int | float)], dtype=np.float64)
    if not len(values):
        return None
    p50, p95, top = np.percentile(values, (50, 95, 100))
    return Spread(len(values), float(p50), float(p95), float(top))
