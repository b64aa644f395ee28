"""The native lane against the Python one: the same upstream bytes, the same client bytes,
the same records, whichever lane read them (``steadystream.stamped._lane``).

Each case runs one upstream response twice over a real loopback socket, through a stamped
connection and the express lane as the relay wires them (a writer task for what the lane
does not take): once with the extension, once with ``STEADYSTREAM_NATIVE=0``. What the
client got (the chunks' payloads, joined) and what the stream recorded (every event's kind,
sizes, usage and text, at both edges; the attempt's end; the committed text) must be equal.
The reads' boundaries differ from run to run; nothing compared depends on them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadystream._clock import MonotonicClock
from steadystream.gateway.attempt import Attempt, express_lane, read_attempt
from steadystream.gateway.buffer import StreamBuffer, StuckClient
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.recording import EdgeLog, StreamRecord
from steadystream.gateway.upstreams import body_reader
from steadystream.gateway.watchdog import Watchdog
from steadystream.gateway.writers import RawOutlet, write_raw
from steadystream.stamped import StampedConnection, StampMode, Target, native
from tests.stamped.conftest import SSE_HEAD, ScriptedServer, chunked

NATIVE = native.NativeLane is not None
# Where the extension can be built (setup.py: Linux and a C compiler), it must have been: a
# missing build would turn every comparison below into Python against Python. Elsewhere
# the install runs the Python lane alone, and there is nothing to compare it with.
BUILDABLE = sys.platform.startswith("linux") and any(
    shutil.which(cc) for cc in (os.environ.get("CC", "cc"), "cc", "gcc")
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not NATIVE and not BUILDABLE, reason="no C compiler: no native lane"),
]


def test_the_extension_is_built_wherever_it_can_be() -> None:
    assert NATIVE, "steadystream.stamped._lane was not built, though a compiler is here"


def chunk(content: str | None = None, **fields: Any) -> bytes:
    delta: dict[str, Any] = {} if content is None else {"content": content}
    delta.update(fields.pop("delta", {}))
    choice: dict[str, Any] = {
        "index": 0,
        "delta": delta,
        "finish_reason": fields.pop("finish", None),
    }
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    obj["choices"] = fields.pop("choices", [choice])
    obj.update(fields)
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ROLE = chunk("", delta={"role": "assistant"})
FINISH = chunk(finish="stop")
DONE = b"data: [DONE]\n\n"
EVENTS = {
    "role": ROLE,
    "content": chunk("tok"),
    "unicode": chunk("naïve ☃ 😀"),
    "empty": chunk(""),
    "role+content": chunk("hi", delta={"role": "assistant"}),
    "reasoning": chunk(None, delta={"reasoning_content": "hmm"}),
    "two-choices": chunk(choices=[{"index": 0, "delta": {"content": "a"}}] * 2),
    "completion": b'data: {"id":"c","object":"text_completion","choices":[{"text":"x"}]}\n\n',
    "usage": chunk(choices=[], usage={"prompt_tokens": 3, "completion_tokens": 5}),
    "finish": FINISH,
    "comment": b": keepalive\n\n",
    "named": b"event: ping\ndata: {}\n\n",
    "crlf": chunk("cr").replace(b"\n\n", b"\r\n\r\n"),
    "space-less": chunk("nospace").replace(b"data: ", b"data:"),
    "two-lines": b'data: {"choices":[{"delta":\ndata: {"content":"x"}}]}\n\n',
    "not-json": b"data: {oops\n\n",
    "error": b'data: {"error":{"message":"engine fell over"}}\n\n',
    "object-error": chunk("x", object="error"),
    "content+tool": chunk("x", delta={"tool_calls": [{"index": 0, "function": {"name": "f"}}]}),
    "content+finish": chunk("last", finish="length"),
    "content+usage": chunk("u", usage={"prompt_tokens": 1, "completion_tokens": 2}),
    "null-error": chunk("fine", error=None),
    "odd-delta": b'data: {"choices":[{"delta":"str"}]}\n\n',
    "null-delta": b'data: {"choices":[{"delta":null,"text":"t"}]}\n\n',
    "no-choices": b'data: {"id":"x"}\n\n',
    "nested-escape": chunk('quote " and \\ and \n newline'),
}


@dataclass
class Relayed:
    """What one run gave: the client's bytes and the stream's records."""

    client: bytes
    failure: tuple[str, str] | None
    up: tuple[Any, ...]
    down: tuple[Any, ...]
    committed: str
    text_events: int
    events_taken: int  # by the native lane
    times: tuple[list[int], list[int]]  # (upstream, downstream) offsets


def dechunk(frames: bytes) -> bytes:
    out, at = bytearray(), 0
    while at < len(frames):
        end = frames.index(b"\r\n", at)
        size = int(frames[at:end], 16)
        out += frames[end + 2 : end + 2 + size]
        assert frames[end + 2 + size : end + 4 + size] == b"\r\n"
        at = end + 4 + size
    return bytes(out)


def edge(log: EdgeLog) -> tuple[Any, ...]:
    return (list(log.kinds), list(log._wire), list(log._text_bytes), list(log._usage), log.texts)


class Client:
    """The client's connection as the outlet sees it: takes every write at once."""

    def __init__(self) -> None:
        self.frames = bytearray()

    def write(self, data: bytes) -> None:
        self.frames += data

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False


def scripted(writes: list[bytes], pause_s: float, head_read: threading.Event) -> ScriptedServer:
    """The head, then (once the relay has read it, as the gateway does before it streams)
    the body's writes, ``pause_s`` apart: a body error is never the head's."""

    def script(peer: socket.socket) -> None:
        head, *body = writes
        peer.sendall(head)
        head_read.wait(5.0)
        for data in body:
            peer.sendall(data)
            time.sleep(pause_s)

    return ScriptedServer(script)


async def relay(url: str, head_read: threading.Event, *, scrub: Any = None) -> Relayed:
    clock = MonotonicClock()
    conn = await StampedConnection.open(
        Target.from_url(url), clock, StampMode.KERNEL, read_timeout_s=10.0
    )
    record = StreamRecord("r", clock.now_ns(), {})
    record.attempts.append({"upstream": "u", "request_id": "r"})  # (the relay's begin_attempt)
    buffer: StreamBuffer[Out] = StreamBuffer(max_bytes=1 << 20, max_events=1000)
    ctx = StreamContext(clock, record, buffer, StuckClient(10**10), scrub=scrub)
    client = Client()

    async def send(message: dict[str, Any]) -> None:
        body = message["body"]
        client.write(b"%x\r\n%b\r\n" % (len(body), body))

    outlet = RawOutlet(ctx, send, client, chunks=True)  # type: ignore[arg-type]
    upstream = UpstreamConfig(name="u", base_url="http://127.0.0.1:9/v1")
    attempt = Attempt(upstream, 0, "r", Watchdog(first_token_ns=10**10, stall_ns=10**10))
    attempt.cutter.keep_raw = False  # as the relay has it with no pacer
    try:
        await conn.send("POST", {}, b"{}")
        await conn.head()
        head_read.set()
        attempt.response = conn
        attempt.body = body_reader(conn, "u")
        attempt.watchdog.start(clock.now_ns())
        conn.on_piece = express_lane(ctx, attempt, outlet, native=conn.native_lane)
        writer = asyncio.ensure_future(write_raw(ctx, outlet))
        failure = await read_attempt(ctx, attempt, outlet)
        ctx.settle()
        buffer.close()
        await writer
    finally:
        lane = conn.native_lane
        conn.close()
    return Relayed(
        client=dechunk(bytes(client.frames)),
        failure=None if failure is None else (failure.cause.value, failure.message),
        up=edge(record.upstream),
        down=edge(record.downstream),
        committed=ctx.progress.content_text,
        text_events=ctx.progress.text_events,
        events_taken=lane.events_taken if lane is not None else 0,
        times=(list(record.upstream.times), list(record.downstream.times)),
    )


def both_ways(
    monkeypatch: pytest.MonkeyPatch,
    writes: list[bytes],
    *,
    pause_s: float = 0.001,
    scrub: Any = None,
) -> tuple[Relayed, Relayed]:
    results = []
    for setting in ("1", "0"):
        monkeypatch.setenv("STEADYSTREAM_NATIVE", setting)
        head_read = threading.Event()
        server = scripted(writes, pause_s, head_read)
        try:
            results.append(asyncio.run(relay(server.url, head_read, scrub=scrub)))
        finally:
            head_read.set()
            server.close()
        # (a stream the relay ended early leaves the server writing to a closed socket)
        assert all(isinstance(e, BrokenPipeError | ConnectionResetError) for e in server.errors)
    monkeypatch.delenv("STEADYSTREAM_NATIVE")
    native_run, python_run = results
    assert python_run.events_taken == 0
    for run in results:  # times differ between runs; what holds of them, not
        up, down = run.times
        assert all(t >= 0 for t in up)
        assert all(d >= u for u, d in zip(up, down, strict=True))  # (same events: same count)
        assert up == sorted(up)
        assert down == sorted(down)
    return native_run, python_run


def same(native_run: Relayed, python_run: Relayed) -> None:
    assert native_run.client == python_run.client
    assert native_run.failure == python_run.failure
    assert native_run.up == python_run.up
    assert native_run.down == python_run.down
    assert native_run.committed == python_run.committed
    assert native_run.text_events == python_run.text_events


def one_write_per_event(events: list[bytes]) -> list[bytes]:
    return [SSE_HEAD, *(chunked(event) for event in events), b"0\r\n\r\n"]


def test_a_typical_stream_goes_natively_and_records_what_python_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = [ROLE, *(chunk(f" t{i}") for i in range(30)), FINISH, DONE]
    native_run, python_run = both_ways(monkeypatch, one_write_per_event(events), pause_s=0.002)
    same(native_run, python_run)
    assert native_run.failure is None
    assert native_run.committed == "".join(f" t{i}" for i in range(30))
    # After the first token (the Python lane's: it moves the watchdog and wakes the guard),
    # content went natively. (How much depends on how the reads fell: the benchmark's.)
    assert native_run.events_taken > 0


def test_reads_the_native_lane_declines_keep_their_order_in_the_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    odd = [EVENTS["comment"], EVENTS["crlf"], EVENTS["usage"], EVENTS["named"], EVENTS["unicode"]]
    events = [ROLE, chunk("a")]
    for i in range(40):
        events.append(chunk(f"{i}"))
        if i % 3 == 0:
            events.append(odd[i % len(odd)])
    events += [FINISH, DONE]
    native_run, python_run = both_ways(monkeypatch, one_write_per_event(events), pause_s=0.002)
    same(native_run, python_run)
    assert native_run.events_taken > 0  # interleaved with the Python lane's, in order


def test_several_events_in_one_chunk_and_several_chunks_in_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    content = [chunk(f"w{i}") for i in range(12)]
    body = [chunked(b"".join(content[:4])), chunked(content[4]) + chunked(content[5])]
    body += [b"".join(chunked(event) for event in content[6:]), chunked(FINISH + DONE)]
    writes = [SSE_HEAD, chunked(ROLE), chunked(chunk("first")), *body, b"0\r\n\r\n"]
    native_run, python_run = both_ways(monkeypatch, writes, pause_s=0.003)
    same(native_run, python_run)
    assert native_run.events_taken > 0


def test_keys_are_scrubbed_from_what_the_native_lane_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = b"sk-secret-123"

    def scrub(data: bytes) -> bytes:
        return data.replace(secret, b"[redacted]")

    events = [ROLE, chunk("a"), *(chunk(f"key {secret.decode()} {i}") for i in range(10))]
    native_run, python_run = both_ways(
        monkeypatch, one_write_per_event([*events, FINISH, DONE]), scrub=scrub
    )
    same(native_run, python_run)
    assert secret not in native_run.client
    assert native_run.client.count(b"[redacted]") == 10
    assert native_run.events_taken > 0


@pytest.mark.parametrize(
    "ending",
    [
        pytest.param([EVENTS["not-json"]], id="a payload that is not JSON"),
        pytest.param([EVENTS["error"]], id="an in-band error"),
        pytest.param([], id="a close without [DONE]"),
        pytest.param([b'data: {"choi'], id="a close mid-event"),
    ],
)
def test_streams_that_end_badly_end_the_same_way(
    monkeypatch: pytest.MonkeyPatch, ending: list[bytes]
) -> None:
    events = [ROLE, *(chunk(f"{i}") for i in range(8)), *ending]
    native_run, python_run = both_ways(monkeypatch, one_write_per_event(events))
    same(native_run, python_run)
    assert native_run.failure is not None


def test_a_malformed_chunk_frame_fails_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [ROLE, *(chunk(f"{i}") for i in range(6))]
    writes = [*one_write_per_event(events)[:-1], b"zz\r\nnot hex\r\n"]
    native_run, python_run = both_ways(monkeypatch, writes)
    same(native_run, python_run)
    assert native_run.failure is not None
    assert "HTTP/1.1" in native_run.failure[1]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    names=st.lists(st.sampled_from(sorted(EVENTS)), max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=10),
    chunk_cuts=st.lists(st.integers(min_value=1, max_value=300), max_size=6),
    done=st.booleans(),
)
def test_any_stream_cut_anywhere_relays_the_same_both_ways(
    monkeypatch: pytest.MonkeyPatch,
    names: list[str],
    cuts: list[int],
    chunk_cuts: list[int],
    done: bool,
) -> None:
    # Mostly content (what the native lane takes), the rest of the menu mixed in.
    events = [ROLE, chunk("first")]
    for i, name in enumerate(names):
        events += [chunk(f"c{i}"), chunk(f"d{i}"), EVENTS[name]]
    events += [FINISH, DONE] if done else [FINISH]
    body = b"".join(events)
    # The body in chunks cut at chunk_cuts (and at every event, where not cut), then the
    # chunked bytes in writes cut at cuts.
    pieces, at = [], 0
    for size in chunk_cuts:
        if at >= len(body):
            break
        pieces.append(body[at : at + size])
        at += size
    pieces += _split_events(body[at:])
    framed = b"".join(chunked(piece) for piece in pieces if piece) + b"0\r\n\r\n"
    writes, at = [SSE_HEAD], 0
    for size in cuts:
        if at >= len(framed):
            break
        writes.append(framed[at : at + size])
        at += size
    writes.append(framed[at:])
    native_run, python_run = both_ways(monkeypatch, writes, pause_s=0.0005)
    same(native_run, python_run)


def _split_events(body: bytes) -> list[bytes]:
    parts = body.split(b"\n\n")
    return [part + b"\n\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
