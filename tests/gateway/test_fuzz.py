"""Hostile bytes through the whole relay path: a socket, the stamped connection, the line.

Any response an upstream could send (a head or garbage, chunked, sized or close-delimited
bodies, SSE fragments, split anywhere, cut off anywhere) goes through a real socket into the
build under test: the connection's reads and its HTTP parser, then the stream's line (cut,
dialect, records, a client write). What may come out is the project's own errors, never
another exception, and the line's records and writes stay consistent. Bounded here (a few
dozen cases per build); ``make sanitize`` runs thousands through a build compiled with
AddressSanitizer (``STEADYSTREAM_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadystream._clock import MonotonicClock
from steadystream._exceptions import ProtocolError, UpstreamStreamError
from steadystream.protocol import chat_chunk, encode_chunk
from steadystream.stamped import StampedConnection, StampMode, Target
from tests.support.line import Rig

EXAMPLES = int(os.environ.get("STEADYSTREAM_FUZZ_EXAMPLES", "40"))

HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 300\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
    b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n",
    b"garbage\r\n\r\n",
    b"",
]
PIECES = [
    encode_chunk(chat_chunk("c", "m", 1, content="hi")),
    encode_chunk(chat_chunk("c", "m", 1, role="assistant")),
    encode_chunk(chat_chunk("c", "m", 1, finish_reason="stop")),
    b"data: [DONE]\n\n",
    b": ping\n\n",
    b'event: error\ndata: {"error": "x"}\n\n',
    b"data: {not json\n\n",
    b"data: \xff\xfe\n\n",
    b"\r\n",
    b"\r",
    b"5\r\nhello\r\n",
    b"0\r\n\r\n",
    b"fffffffffffffffff\r\n",
    b"data: " + b"z" * 3000,
]
bodies = st.lists(st.sampled_from(PIECES) | st.binary(max_size=200), max_size=16)


async def _relay(head: bytes, body: list[bytes], cuts: list[int]) -> Rig:
    """Serve ``head`` and ``body`` over a socket, cut into writes at ``cuts``, then close;
    read them through a stamped connection into a line."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    rig = Rig()
    conn = StampedConnection(
        ours, Target.from_url("http://127.0.0.1:9/v1"), MonotonicClock(), StampMode.USER,
        tls=None, read_timeout_s=2.0,
    )  # fmt: skip
    data = head + b"".join(body)
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})

    async def serve() -> None:
        try:
            for start, end in itertools.pairwise(bounds):
                await loop.sock_sendall(theirs, data[start:end])
                await asyncio.sleep(0)
        except OSError:
            pass  # the connection gave up first: what it is allowed to do
        finally:
            theirs.close()

    server = asyncio.ensure_future(serve())
    try:
        await conn.send("POST", {}, b"{}")
        head_seen = await conn.head()
        if head_seen.status == 200:
            rig.attempt.response = conn
            rig.line.begin(rig.attempt)
            await conn.stream_body(rig.line.feed)
    except (UpstreamStreamError, ProtocolError):
        pass  # the project's own errors, naming what was wrong
    finally:
        conn.close()
        await server
    return rig


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    head=st.sampled_from(HEADS),
    body=bodies,
    cuts=st.lists(st.integers(min_value=0, max_value=80_000), max_size=8),
)
def test_hostile_bytes_give_the_projects_errors_or_a_consistent_record(
    build: str, head: bytes, body: list[bytes], cuts: list[int]
) -> None:
    rig = asyncio.run(_relay(head, body, cuts))
    up, down = rig.up, rig.down
    assert len(down) <= len(up)  # nothing reaches the client that did not arrive
    assert list(up.times) == sorted(up.times)
    for write in rig.transport.written:  # each write one whole HTTP/1.1 chunk of whole events
        size, _, rest = write.partition(b"\r\n")
        assert int(size, 16) == len(rest) - 2
        assert rest.endswith(b"\r\n")
        assert rest[:-2].endswith((b"\n", b"\r"))
