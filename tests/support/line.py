"""A stream's line on a bench of fakes: a fake clock, a client transport and an upstream
connection that only record what is asked of them, for the tests of the relay's hot path.

The line and its event cutter are the build under test's (:func:`line_build`, chosen by
``STEADYSTREAM_NATIVE`` as the ``build`` fixture sets it, tests/conftest.py): a test that
builds a :class:`Rig` runs the compiled line on the compiled build.
"""

from __future__ import annotations

from typing import Any

from steadystream._clock import FakeClock
from steadystream.gateway.attempt import Attempt
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.line import line_build
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import RawOutlet
from steadystream.protocol import chat_chunk, encode_chunk


class FakeTransport:
    """The client's transport: keeps what is written; a test sets what it reports."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.unsent = 0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def is_closing(self) -> bool:
        return self.closing


class FakeConnection:
    """What the line asks of the upstream's connection: to pause and resume its reads."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")


async def _never(message: Any) -> None:
    raise AssertionError("the line went through the server's send")


class Rig:
    """One stream's line, begun on an attempt whose role chunk is already through."""

    def __init__(
        self, *, chunks: bool = True, scrub: Any = None, max_events: int = 100, now: int = 0
    ) -> None:
        self.clock = FakeClock(now)
        record = StreamRecord("r", 0, {})
        record.attempts.append({})
        buffer: StreamBuffer[Out] = StreamBuffer(max_bytes=1 << 20, max_events=max_events)
        self.ctx = StreamContext(self.clock, record, buffer, StuckClient(10**9), scrub=scrub)
        self.transport = FakeTransport()
        self.outlet = RawOutlet(self.ctx, _never, self.transport, chunks=chunks)  # type: ignore[arg-type]
        config = UpstreamConfig(name="u", base_url="http://127.0.0.1:9/v1")
        watchdog = Watchdog(first_token_ns=10**9, stall_ns=10**9)
        build = line_build()
        self.attempt = Attempt(config, 0, "r", watchdog, build.EventCutter())
        self.attempt.watchdog.start(0)
        self.conn = FakeConnection()
        self.attempt.response = self.conn  # type: ignore[assignment]
        self.line = build.StreamLine(self.ctx, self.outlet)
        self.line.begin(self.attempt)
        assert not self.line.feed(0, encode_chunk(chat_chunk("c", "m", 1, role="assistant")))
        self.transport.written.clear()

    @property
    def up(self) -> Any:
        return self.ctx.record.upstream

    @property
    def down(self) -> Any:
        return self.ctx.record.downstream
