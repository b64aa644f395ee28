"""The live driver: pace a stream of events as it arrives, on an injected clock.

:func:`pace` runs two loops. A reader task pulls events from the source and pushes them into
the pacer the moment they arrive; the consumer's side asks the pacer for what is due and
sleeps on ``clock.sleep_until`` until the next wake-up or the next arrival, whichever comes
first. The pacer's waiting therefore never holds up the upstream read.

Rules (the simulation follows the same ones, so both give the same release times):

- Backpressure. After each arrival the reader compares the tokens held as the current
  instant began plus those that arrived during it with ``high_watermark`` (default 50); at
  or above it, it pauses: it takes at most one more event from the source and holds it
  until a release leaves at most ``low_watermark`` (default 20) tokens held. Counting from
  the start of the instant makes the rule independent of the order in which simultaneous
  arrivals and releases are handled. The pacer then holds at most ``high_watermark - 1``
  tokens plus one event (and the reader one more event). The reader also pauses while
  ``high_watermark`` released events wait for the consumer (events without tokens, such as
  keepalives, count there), until the consumer takes them: a consumer that stops reading
  stops the upstream read too.
- End of stream. When the source ends, the pacer drains what it holds within its ``tail``
  (see :mod:`steadystream.shaping.base`); the paused reader's one-event look-ahead sees the
  end as soon as it comes, so the last token leaves at most ``tail`` after the source ended.
- Source errors. An exception from the source ends the input like a normal end: what was
  already buffered is delivered by the same tail rule, then the exception is raised to the
  consumer, unchanged.
- Cancellation. When the consumer stops (``aclose()``, ``break``, task cancellation), the
  reader is cancelled and the source is closed with ``aclose()`` explicitly (cancelling a
  task does not close an async generator it was iterating).

Released events carry the clock time at which the pacer let them go in ``time_ns``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from steadystream._clock import Clock
from steadystream._types import Event, Nanos
from steadystream.shaping.base import (
    DEFAULT_HIGH_WATERMARK,
    DEFAULT_LOW_WATERMARK,
    Pacer,
    check_watermarks,
    is_paced,
)

__all__ = ["pace"]


async def pace(
    source: AsyncIterator[Event],
    pacer: Pacer,
    clock: Clock,
    *,
    high_watermark: int | None = DEFAULT_HIGH_WATERMARK,
    low_watermark: int = DEFAULT_LOW_WATERMARK,
) -> AsyncIterator[Event]:
    """Yield the events of ``source`` as ``pacer`` releases them, on ``clock``.

    ``pacer`` is used as given (one pacer per stream; its ``buffered`` can be watched while
    pacing): one that already paced a stream is refused (a closed pacer would drop every
    event); ``pacer.fresh()`` makes another. ``high_watermark=None`` turns backpressure off.
    """
    if pacer.used:
        raise ValueError(
            f"pacer {pacer.spec()} has already paced a stream (one pacer paces one stream);"
            " pass pacer.fresh() for another"
        )
    check_watermarks(pacer, high_watermark, low_watermark)
    link = _Link(pacer, clock, high_watermark, low_watermark)
    reader = asyncio.create_task(link.read(source))
    try:
        while True:
            now = clock.now_ns()
            link.touch(now)
            events = pacer.ready(now)
            link.release_done()
            if events:
                for event in events:
                    yield event
                continue
            if pacer.done:
                break
            await link.wait(pacer.next_due(now))
        if link.error is not None:
            raise link.error
    finally:
        link.stop_timer()
        reader.cancel()
        try:
            await asyncio.wait([reader])  # the reader must leave the source before it closes
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()


class _Link:
    """State shared by the reader task and the consumer's side of :func:`pace`."""

    def __init__(self, pacer: Pacer, clock: Clock, high: int | None, low: int) -> None:
        self.pacer = pacer
        self.clock = clock
        self.high = high
        self.low = low
        self.error: Exception | None = None
        self.paused = False
        self.backlogged = False  # paused until the consumer takes what was released
        self._instant: int | None = None
        self._start_held = 0
        self._pushed = 0
        self._waiter: asyncio.Future[None] | None = None
        self._resume: asyncio.Future[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._timer_at: int | None = None

    def touch(self, now: Nanos) -> None:
        """Note the tokens held as a new instant begins (the backpressure gauge)."""
        if now != self._instant:
            self._instant = now
            self._start_held = self.pacer.buffered
            self._pushed = 0

    async def read(self, source: AsyncIterator[Event]) -> None:
        pacer = self.pacer
        clock = self.clock
        high = self.high
        try:
            while True:
                try:
                    event = await anext(source)
                except StopAsyncIteration:
                    break
                if self.paused or self.backlogged:
                    # Hold this one event until the buffer is low. Having asked for it
                    # anyway means the end of the stream is seen as soon as it comes, so
                    # the tail drain is never delayed by backpressure.
                    self._resume = asyncio.get_running_loop().create_future()
                    await self._resume
                now = clock.now_ns()
                self.touch(now)
                pacer.push(now, event)
                if is_paced(event):
                    self._pushed += event.tokens
                    if high is not None and self._start_held + self._pushed >= high:
                        self.paused = True
                if high is not None and pacer.waiting >= high:
                    # Released events the consumer has not taken (a stalled client): events
                    # without tokens (keepalives, role chunks) count here, not in the gauge.
                    self.backlogged = True
                self._wake()
        except Exception as exc:  # delivered to the consumer after the buffer drains
            self.error = exc
        now = clock.now_ns()
        self.touch(now)
        pacer.close(now)
        self._wake()

    def release_done(self) -> None:
        """After the consumer took what was due: resume a paused read if the buffer is low."""
        if self.paused and self.pacer.buffered <= self.low:
            self.paused = False
        self.backlogged = False  # the consumer has just taken every released event
        if not self.paused and self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    async def wait(self, due: Nanos | None) -> None:
        """Until the next arrival, the end of input, or ``due``."""
        if due is None:
            if self.paused:
                raise RuntimeError(
                    f"{self.pacer.name} holds {self.pacer.buffered} tokens with nothing due "
                    "while the read is paused"
                )
            self.stop_timer()
        elif self._timer is None or self._timer.done() or self._timer_at != due:
            self.stop_timer()
            self._timer = asyncio.create_task(self._alarm(due))
            self._timer_at = due
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def stop_timer(self) -> None:
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
        self._timer = None

    async def _alarm(self, due: Nanos) -> None:
        await self.clock.sleep_until(due)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
