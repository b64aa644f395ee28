"""Finished streams turned into telemetry on a thread of their own, not the event loop's.

Measured (benchmarks/bench_otel.py): a 200-chunk stream costs a few milliseconds to turn into
its span and observations and hand to the SDK (one histogram record per chunk). On the loop
that would be a pause of every other stream at each stream's end, so the loop only appends the
finished stream to a bounded queue (a stream more than ``bound`` waiting is dropped and
counted) and this worker does the rest.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from steadystream.otel.streams import StreamMeasures, StreamSpan
from steadystream.otel.traceparent import TraceContext

if TYPE_CHECKING:
    from steadystream.otel.sdk import OtelExporter

__all__ = ["ExportWorker", "Made"]

Made = tuple[StreamSpan, StreamMeasures, TraceContext | None]
"""What a finished stream becomes: its span, its observations, its trace context."""

log = logging.getLogger("steadystream.otel")


class ExportWorker:
    """Runs ``make()`` for each submitted stream on its own thread, and exports the result."""

    def __init__(self, exporter: OtelExporter, bound: int) -> None:
        self.exporter = exporter
        self._queue: queue.Queue[Callable[[], Made] | None] = queue.Queue(maxsize=bound)
        self._thread = threading.Thread(target=self._work, name="steadystream-otel", daemon=True)
        self._thread.start()

    def submit(self, make: Callable[[], Made]) -> None:
        """Queue one stream (never waits: a full queue drops it, counted)."""
        try:
            self._queue.put_nowait(make)
        except queue.Full:
            self.exporter.drop()

    def close(self) -> None:
        """Finish what is queued and stop the thread (blocks: call it off the loop)."""
        self._queue.put(None)
        self._thread.join()

    def _work(self) -> None:
        while (make := self._queue.get()) is not None:
            try:
                self.exporter.export_stream(*make())
            except Exception:  # telemetry must never take anything down with it
                log.exception("a stream could not be exported")
