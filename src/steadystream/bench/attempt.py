"""One attempt at a streamed request, as :class:`~steadystream.bench.client.StreamClient`
records it: its instants, its recorder, its cancel or drop point, and the timeline it became.

It is handed what it needs at construction (the clock, the stamp mode, the labels, the API),
never the client itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from steadystream._clock import Clock
from steadystream._exceptions import ProtocolError
from steadystream._types import Outcome, Where
from steadystream.bench.cancel import CancelPoint
from steadystream.bench.disconnect import EventIds, Reconnect
from steadystream.bench.endpoint import USAGE_LEVELS
from steadystream.bench.lag import LAG_FLAG_NS
from steadystream.bench.workload import RequestSpec
from steadystream.protocol import Dialect, SseItem, StreamRecorder
from steadystream.protocol.apis import new_dialect
from steadystream.stamped import StampMode
from steadystream.timeline import Timeline

__all__ = ["AttemptState", "Sent"]


class Sent(NamedTuple):
    """A recorded stream and the clock instant its request was sent."""

    timeline: Timeline
    sent_ns: int


class AttemptState:
    """One attempt: its instants, its recorder once the response began, and how it ended.

    ``wire_ns`` is when the request's last byte went to the kernel: the request-sent instant
    every time in the timeline counts from. Time spent before it (connecting, waiting for the
    event loop) is the client's, not the server's; it is kept in ``meta["send_ms"]``.
    """

    __slots__ = (
        "begin_ns",
        "cancel",
        "chunks",
        "clock",
        "clock_step_ns",
        "counter",
        "dialect_name",
        "dropped",
        "end_missing_ms",
        "end_ns",
        "ids",
        "keep_text",
        "labels",
        "last_stamp",
        "late_stamps",
        "max_tokens",
        "reads",
        "reconnects",
        "recorder",
        "request_id",
        "returned",
        "scrub",
        "stamp_events",
        "stamps",
        "started_at",
        "status",
        "timeline",
        "wire_ns",
    )

    def __init__(
        self,
        request_id: str,
        cancel: CancelPoint | None,
        max_tokens: int | None,
        *,
        clock: Clock,
        stamps: StampMode,
        keep_text: bool,
        labels: dict[str, str],
        api: str,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self.clock = clock
        self.scrub = scrub  # hides the request's credentials in what came back (Endpoint)
        self.stamps = stamps
        self.keep_text = keep_text
        self.labels = labels
        self.dialect_name = api  # the endpoint's API: its dialect reads the events
        self.request_id = request_id
        self.cancel = cancel
        self.max_tokens = max_tokens  # as sent: the token count of a stream cut for length
        self.started_at = time.time()
        self.begin_ns = clock.now_ns()
        self.wire_ns: int | None = None
        self.recorder: StreamRecorder | None = None
        self.status: int | None = None
        self.reads = 0
        self.chunks = 0  # content chunks seen, counted only for --cancel-after Ntok
        self.counter: Dialect | None = None  # what counts them
        self.timeline: Timeline | None = None
        self.end_ns: int | None = None  # the stamp of the body's last read
        self.clock_step_ns = 0
        self.last_stamp = -1
        self.stamp_events = 0  # events completed so far under last_stamp
        self.late_stamps: set[int] = set()  # stamps several events shared in late reads
        self.ids: EventIds | None = None  # the events' ids, for a stream that drops
        self.dropped = False  # at its drop point (--disconnect)
        # How long a body was held open with no end after its finish reason, when the client
        # closed it (--finish-timeout); None: it ended by itself.
        self.end_missing_ms: float | None = None
        self.reconnects: list[Reconnect] = []
        self.returned: Reconnect | None = None  # the return now being read

    @property
    def sent_ns(self) -> int:
        return self.wire_ns if self.wire_ns is not None else self.begin_ns

    def start_recording(self) -> StreamRecorder:
        if self.recorder is None:
            self.recorder = StreamRecorder(
                self.request_id,
                Where.CLIENT,
                keep_text=self.keep_text,
                labels=self.labels,
                started_at=self.started_at,
                sent_ns=self.sent_ns,
                max_tokens=self.max_tokens,
                dialect=new_dialect(self.dialect_name),
            )
        return self.recorder

    def note_stamp(self, stamp: int, events: int) -> None:
        """Count events that share one stamp in a read taken late: lag may have merged them.

        Events written together share a stamp rightly; events that waited together in the
        kernel's queue while the loop was busy share the newest one's stamp wrongly. A read
        the loop took promptly after its stamp holds the former. User stamps are taken when
        the read is, so how long ago one was says nothing of how long its events waited:
        only kernel stamps are counted.
        """
        if self.stamps is not StampMode.KERNEL:
            return
        if stamp == self.last_stamp:
            self.stamp_events += events
        else:
            self.last_stamp, self.stamp_events = stamp, events
        if self.stamp_events > 1 and self.clock.now_ns() - stamp > LAG_FLAG_NS:
            self.late_stamps.add(stamp - self.sent_ns)

    def response_headers(self, now_ns: int, status: int) -> None:
        if self.recorder is None and self.wire_ns is not None and now_ns < self.wire_ns:
            # The head's (kernel) stamp is before the clock was read after the send returned
            # (the loop or the GIL held this task between the two): the request was on the
            # wire by then, and no time in the timeline may come before it was sent.
            self.wire_ns = now_ns
        self.start_recording().headers(now_ns)
        self.status = status

    def finish(self, now_ns: int, outcome: Outcome | None, error: str | None) -> None:
        self.timeline = self.start_recording().finish(now_ns, outcome=outcome, error=error)

    def count_tokens(self, items: Sequence[SseItem], limit: int) -> bool:
        """Count content chunks among ``items``; True once ``limit`` is reached."""
        if self.counter is None:  # (a dialect of its own: the recorder's keeps its state)
            self.counter = new_dialect(self.dialect_name)
        decode = self.counter.decode
        for item in items:
            try:
                decoded = decode(item)
            except ProtocolError:
                continue
            if decoded.kind is not None and decoded.kind.carries_text and decoded.text:
                self.chunks += 1
        return self.chunks >= limit

    def cancel_reason(self) -> str:
        point = self.cancel.describe() if self.cancel is not None else "?"
        return f"cancelled by the client after {point} (--cancel-after)"

    def sent(self, level: int, spec: RequestSpec) -> Sent:
        assert self.timeline is not None
        if self.scrub is not None:
            self._hide_secrets(self.timeline, self.scrub)
        meta = self.timeline.meta
        meta["send_ms"] = round((self.sent_ns - self.begin_ns) / 1e6, 3)
        meta["stamps"] = self.stamps.value
        meta["stamps_shared"] = _shared(self.timeline, self.late_stamps)
        if abs(self.clock_step_ns) > 1_000_000:
            meta["clock_step_ms"] = round(self.clock_step_ns / 1e6, 3)
        meta["usage_requested"] = USAGE_LEVELS[level]
        meta["input_tokens_estimate"] = spec.input_tokens
        if spec.max_tokens is not None:
            meta["max_tokens"] = spec.max_tokens
        if self.status is not None:
            meta["http_status"] = self.status
        if self.cancel is not None:
            meta["cancel_after"] = self.cancel.describe()
        if self.reconnects:
            meta["reconnects"] = [reconnect.as_meta() for reconnect in self.reconnects]
        if self.end_missing_ms is not None:
            meta["end_missing_ms"] = self.end_missing_ms
        return Sent(self.timeline, self.sent_ns)

    def _hide_secrets(self, timeline: Timeline, scrub: Callable[[str], str]) -> None:
        """A server's words (its errors, the answer when kept) with the request's credentials
        hidden: a server that quotes the key back must not put it in the file."""
        if timeline.error is not None:
            timeline.error = scrub(timeline.error)
        for reconnect in self.reconnects:
            if reconnect.error is not None:
                reconnect.error = scrub(reconnect.error)
        if timeline.texts is not None:
            timeline.texts = [scrub(text) for text in timeline.texts]


def _shared(timeline: Timeline, late_stamps: set[int]) -> int:
    """Text events that share a late read's stamp with the text event before them.

    Only gaps between text events are measured; a usage chunk or ``[DONE]`` that came in
    the same read as the last token costs nothing.
    """
    if not late_stamps:
        return 0
    times = timeline.times[timeline.text_mask]
    same = np.flatnonzero(times[1:] == times[:-1]) + 1
    return sum(1 for i in same if int(times[i]) in late_stamps)
