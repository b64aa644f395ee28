"""The relay line's own CPU per upstream read, in process, both builds side by side.

    python benchmarks/bench_line.py
    python benchmarks/bench_line.py --reads 200000 --repeat 7

One stream's line (gateway/_line_py.py) on a fake clock and a client transport that only
keeps what it is given, fed the same one-event read of a chat chunk again and again, as an
upstream sends it: cut, classified, recorded at both edges, written. Then the same with
resume's tee (each event's ``id:`` and the event kept in the stream's log), and with a
shared store that takes what the tee hands it (a stream this process does not keep). No
socket, no event loop: what is left is the Python objects and calls of the line itself, the
part of a relayed event the compiled build is for (benchmarks/bench_gateway.py measures the
whole relay). Best of ``--repeat`` turns, microseconds per read.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import steadystream.gateway._line_py as _line_py
import steadystream.gateway.resume._tee_py as _tee_py
from steadystream._build import builds
from steadystream._clock import FakeClock
from steadystream.gateway.attempt import Attempt
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.recording import StreamRecord
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import RawOutlet
from steadystream.protocol import chat_chunk, encode_chunk

EVENT = encode_chunk(chat_chunk("chatcmpl-1", "lab", 1, content=" token"))


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


class _Connection:
    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class _Shared:
    def __init__(self) -> None:
        self.queued: list[Any] = []

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        self.queued.append((stream_id, first_id, events, size))
        if len(self.queued) > 1000:
            self.queued.clear()


async def _never(message: Any) -> None:
    raise AssertionError("the line went through the server's send")


def _line(line_build: ModuleType, stamp: Callable[[bytes], bytes] | None) -> tuple[Any, Any]:
    record = StreamRecord("r", 0, {})
    record.attempts.append({})
    buffer: StreamBuffer[Out] = StreamBuffer(max_bytes=1 << 20, max_events=100)
    ctx = StreamContext(FakeClock(0), record, buffer, StuckClient(10**9))
    transport = _Transport()
    outlet = RawOutlet(ctx, _never, transport, chunks=True)  # type: ignore[arg-type]
    watchdog = Watchdog(first_token_ns=10**9, stall_ns=10**9)
    upstream = UpstreamConfig(name="u", base_url="http://127.0.0.1:9/v1")
    attempt = Attempt(upstream, 0, "r", watchdog, line_build.EventCutter())
    watchdog.start(0)
    attempt.response = _Connection()  # type: ignore[assignment]
    line = line_build.StreamLine(ctx, outlet, stamp)
    line.begin(attempt)
    line.feed(0, encode_chunk(chat_chunk("chatcmpl-1", "lab", 1, role="assistant")))
    return line, transport


def _time(line: Any, transport: _Transport, reads: int, repeat: int) -> float:
    feed = line.feed
    written = transport.written
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(reads):
            feed(i, EVENT)
            if len(written) > 1000:
                written.clear()
        best = min(best, (time.perf_counter() - start) / reads)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=100_000, help="reads per turn")
    parser.add_argument("--repeat", type=int, default=5, help="turns; the best is reported")
    args = parser.parse_args()
    lines = list(zip(builds(_line_py), builds(_tee_py), strict=True))
    print("| build | line alone | + resume tee | + tee handing to a shared store |")
    print("|---|---:|---:|---:|")
    for line_build, tee_build in lines:
        os.environ["STEADYSTREAM_NATIVE"] = "1" if line_build is not _line_py else "0"
        name = "compiled" if line_build is not _line_py else "Python"
        figures = []
        for shared in (None, False, True):
            stamp = None
            if shared is not None:
                log = tee_build.StreamLog(1 << 62)
                tee = tee_build.StreamTee("s", log, _Shared() if shared else None, None)
                stamp = tee.stamp
            line, transport = _line(line_build, stamp)
            figures.append(_time(line, transport, args.reads, args.repeat))
        print(f"| {name} | " + " | ".join(f"{value:.2f} µs" for value in figures) + " |")


if __name__ == "__main__":
    main()
