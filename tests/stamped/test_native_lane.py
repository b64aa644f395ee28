"""The native lane alone (``steadystream.stamped._lane``), with stand-ins for what it reads.

The lane reads a few attributes of the connection, the attempt, the cutter, the watchdog and
the outlet, calls the client transport's ``write``, ``get_write_buffer_size`` and
``is_closing``, and hands the connection's ``on_body`` what it does not take. Stand-ins with
those attributes show each rule on its own; ``tests/gateway/test_native.py`` holds the lane
to the Python one end to end.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import deque
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from steadystream.stamped import native
from tests.gateway.test_express import FakeTransport

pytestmark = pytest.mark.skipif(native.NativeLane is None, reason="needs the built extension")
# (tests/gateway/test_native.py fails outright where the extension is missing)

RECEIVED = 1_000
STAMP = 5_000


def event(text: str, **delta: Any) -> bytes:
    obj = {"id": "c", "choices": [{"index": 0, "delta": {"content": text, **delta}}]}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class Stand:
    """A lane armed over stand-ins, as the express lane arms it."""

    def __init__(self, *, scrub: Any = None, client_fd: int = -1) -> None:
        self.handed: list[bytes] = []
        self.conn = SimpleNamespace(
            _stopped=False,
            _complete=False,
            _queueing=True,
            _stamp=STAMP,
            _taken=0,
            on_body=self.handed.append,
        )
        self.attempt = SimpleNamespace(idle=True, failure=None)
        self.cutter = SimpleNamespace(_whole=True, keep_raw=False, envelope={"id": "c"})
        self.watchdog = SimpleNamespace(last_token_ns=RECEIVED + 1)
        self.outlet = SimpleNamespace(busy=False)
        self.waiting: deque[Any] = deque()
        self.queued: deque[Any] = deque()
        self.transport = FakeTransport()
        make = native.NativeLane
        assert make is not None
        self.lane = make(
            self.conn,
            fd=-1,
            kernel=False,
            offset_ns=0,
            pending=deque(),
            queued=self.queued,
        )
        self.arm(scrub=scrub, client_fd=client_fd)

    def arm(
        self, *, scrub: Any = None, client_fd: int = -1, max_event_bytes: int = 1 << 20
    ) -> None:
        self.lane.arm(
            attempt=self.attempt,
            cutter=self.cutter,
            watchdog=self.watchdog,
            waiting=self.waiting,
            outlet=self.outlet,
            transport=self.transport,
            scrub=scrub,
            received_ns=RECEIVED,
            max_event_bytes=max_event_bytes,
            client_fd=client_fd,
        )

    def records(self) -> tuple[list[int], list[int], list[int], list[int], list[str]]:
        taken = self.lane.take_records()
        assert taken is not None
        up, down, wire, text_bytes, texts = taken
        count = len(texts)
        return (
            list(struct.unpack(f"={count}q", up)),
            list(struct.unpack(f"={count}q", down)),
            list(struct.unpack(f"={count}i", wire)),
            list(struct.unpack(f"={count}i", text_bytes)),
            texts,
        )


def frame(body: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(body), body)


def test_a_piece_of_whole_content_events_goes_out_as_one_chunk_and_is_recorded() -> None:
    stand = Stand()
    body = event("hello") + event("naïve ☃") + event("x", role="assistant")
    stand.lane.on_body(body)
    assert stand.transport.written == [frame(body)]
    assert stand.handed == []
    assert stand.conn._taken == 1  # (a drain in Python reads it)
    up, down, wire, text_bytes, texts = stand.records()
    assert texts == ["hello", "naïve ☃", "x"]
    assert up == [STAMP - RECEIVED] * 3
    assert all(t >= up[0] for t in down)  # sent after it came
    assert wire == [len(event("hello")), len(event("naïve ☃")), len(event("x", role="assistant"))]
    assert text_bytes == [5, len("naïve ☃".encode()), 1]
    assert stand.lane.take_records() is None  # taken once
    assert (stand.lane.pieces_taken, stand.lane.events_taken) == (1, 3)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"data: [DONE]\n\n", id="[DONE]"),
        pytest.param(event("a") + b"data: [DONE]\n\n", id="content then [DONE]"),
        pytest.param(event("", role="assistant"), id="a role chunk"),
        pytest.param(b": keepalive\n\n", id="a comment"),
        pytest.param(event("a")[:-1], id="a half event"),
        pytest.param(event("a").replace(b"\n\n", b"\r\n\r\n"), id="CRLF"),
        pytest.param(event("a") + b"\n", id="a blank line more"),
        pytest.param(
            b'data: {"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]}\n\n',
            id="a finish reason",
        ),
        pytest.param(b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n', id="usage"),
        pytest.param(b'data: {"error": {"message": "no"}}\n\n', id="an error"),
        pytest.param(b"data: {not json\n\n", id="not JSON"),
        pytest.param(
            b'data: {"choices": [{"delta": {"content": "a"}}]}\ndata: x\n\n', id="two lines"
        ),
        pytest.param(b'event: x\ndata: {"choices": []}\n\n', id="a named event"),
        pytest.param(
            b'data: {"choices":[{"delta":{"content":"a","tool_calls":[]}}]}\n\n',
            id="content and a tool call",
        ),
        pytest.param(
            b'data: {"choices":[{"delta":{"content":"\\ud83d\\ude00"}}], "object": "error"}\n\n',
            id="object error",
        ),
    ],
)
def test_anything_else_goes_to_the_connection_untouched(body: bytes) -> None:
    stand = Stand()
    stand.lane.on_body(body)
    assert stand.handed == [body]
    assert stand.transport.written == []
    assert stand.lane.take_records() is None
    assert stand.conn._taken == 0


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("the reader has a read in hand", lambda s: setattr(s.attempt, "idle", False)),
        ("the watchdog stopped the reader", lambda s: setattr(s.attempt, "failure", "stall")),
        ("the buffer holds pieces", lambda s: s.waiting.append(1)),
        ("the connection queued pieces", lambda s: s.queued.append((1, b"x"))),
        ("the writer is sending", lambda s: setattr(s.outlet, "busy", True)),
        ("the client has bytes unsent", lambda s: setattr(s.transport, "unsent", 10)),
        ("the client connection is closing", lambda s: setattr(s.transport, "closing", True)),
        ("the cutter is mid-stream", lambda s: setattr(s.cutter, "_whole", False)),
        ("the body ended", lambda s: setattr(s.conn, "_complete", True)),
        ("the reader stopped", lambda s: setattr(s.conn, "_stopped", True)),
        ("a Python read's records are due", lambda s: s.lane.hold()),
    ],
)
def test_the_lane_takes_nothing_while(what: str, change: Any) -> None:
    stand = Stand()
    change(stand)
    body = event("a")
    stand.lane.on_body(body)
    assert stand.handed == [body], what
    assert stand.transport.written == []


def test_no_first_token_no_lane_the_python_one_wakes_the_guard() -> None:
    stand = Stand()
    stand.watchdog.last_token_ns = None
    stand.lane.on_body(event("first"))
    assert stand.handed == [event("first")]
    stand.watchdog.last_token_ns = RECEIVED + 2
    stand.lane.on_body(event("second"))
    assert stand.transport.written == [frame(event("second"))]


def test_held_until_resumed() -> None:
    stand = Stand()
    stand.lane.hold()
    stand.lane.hold()
    stand.lane.resume()
    stand.lane.on_body(event("a"))  # one Python read's records still due
    stand.lane.resume()
    stand.lane.on_body(event("b"))
    assert stand.handed == [event("a")]
    assert stand.transport.written == [frame(event("b"))]


def test_keys_are_scrubbed_before_the_write_and_the_records_keep_the_text() -> None:
    stand = Stand(scrub=lambda data: data.replace(b"sk-1", b"[key]"))
    stand.lane.on_body(event("key sk-1 here"))
    assert stand.transport.written == [frame(event("key [key] here"))]
    assert stand.records()[4] == ["key sk-1 here"]  # redacted when recorded, as Python's


def test_a_piece_over_the_event_limit_is_the_python_lanes() -> None:
    stand = Stand()
    stand.arm(max_event_bytes=64)
    stand.lane.on_body(event("x" * 100))
    assert stand.handed == [event("x" * 100)]


def test_keep_raw_disarms_and_a_released_lane_keeps_its_records() -> None:
    stand = Stand()
    stand.lane.on_body(event("a"))
    stand.lane.release()
    assert not stand.lane.armed
    stand.lane.on_body(event("b"))  # released: nothing happens
    assert stand.records()[4] == ["a"]
    raw = Stand()
    raw.cutter.keep_raw = True
    raw.arm()
    assert not raw.lane.armed  # each piece's own bytes are wanted: Python's cut


def _client_pair(send_buffer: int) -> tuple[socket.socket, socket.socket]:
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    right.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, send_buffer)
    left.setblocking(False)
    return left, right


def _drain(sock: socket.socket) -> bytes:
    sock.setblocking(False)
    out = bytearray()
    while True:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return bytes(out)
        if not data:
            return bytes(out)
        out += data


def test_on_a_plain_socket_the_chunk_goes_straight_to_it() -> None:
    left, right = _client_pair(1 << 16)
    with left, right:
        stand = Stand(client_fd=left.fileno())
        body = event("to the socket")
        stand.lane.on_body(body)
        assert stand.transport.written == []
        assert _drain(right) == frame(body)


def test_what_the_socket_does_not_take_goes_on_through_the_transport_after_it() -> None:
    left, right = _client_pair(4096)
    with left, right:
        stand = Stand(client_fd=left.fileno())
        body = event("y" * 50_000)
        stand.lane.on_body(body)
        direct = _drain(right)
        assert 0 < len(direct) < len(frame(body))
        assert len(stand.transport.written) == 1
        assert direct + stand.transport.written[0] == frame(body)


def test_a_socket_that_takes_nothing_leaves_the_whole_chunk_to_the_transport() -> None:
    left, right = _client_pair(4096)
    with left, right:
        while True:  # fill it
            try:
                left.send(b"z" * 4096)
            except BlockingIOError:
                break
        stand = Stand(client_fd=left.fileno())
        stand.lane.on_body(event("late"))
        assert stand.transport.written == [frame(event("late"))]


def test_a_closed_client_socket_is_the_transports_to_report() -> None:
    left, right = _client_pair(1 << 16)
    right.close()
    with left:
        stand = Stand(client_fd=left.fileno())
        stand.lane.on_body(event("gone"))  # EPIPE: no signal, no exception here
        assert stand.transport.written == [frame(event("gone"))]


def test_the_gateway_says_which_lane_relays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEADYSTREAM_NATIVE", raising=False)
    assert native.describe() == "the native lane"
    monkeypatch.setenv("STEADYSTREAM_NATIVE", "0")
    assert "off: STEADYSTREAM_NATIVE=0" in native.describe()
    assert native.lane_maker(time.perf_counter_ns) is None
    monkeypatch.delenv("STEADYSTREAM_NATIVE")
    assert native.lane_maker(time.perf_counter_ns) is native.NativeLane
    assert native.lane_maker(lambda: 0) is None  # a fake clock: the stamps would disagree
    monkeypatch.setattr(native, "_native", None)
    assert "not built" in native.describe()


@pytest.mark.parametrize("where", ["a property it reads", "the transport's write", "its size"])
def test_a_release_from_code_the_lane_calls_waits_for_the_end_of_the_take(where: str) -> None:
    stand = Stand()
    release = stand.lane.release
    if where == "a property it reads":

        class Outlet:
            @property
            def busy(self) -> bool:
                release()
                return False

        stand.outlet = Outlet()  # type: ignore[assignment]
    elif where == "the transport's write":
        write = stand.transport.write
        stand.transport.write = lambda data: (release(), write(data))  # type: ignore[method-assign]
    else:
        stand.transport.get_write_buffer_size = lambda: (release(), 0)[1]  # type: ignore[method-assign]
    stand.arm()
    stand.lane.on_body(event("a"))  # (it crashed here, on references the release let go of)
    assert not stand.lane.armed
    stand.lane.on_body(event("b"))  # released: nothing more
    taken = stand.lane.take_records()
    if where == "a property it reads":  # (let go of before it wrote: the piece was not its)
        assert taken is None
        assert stand.transport.written == []
    else:  # (let go of while it wrote: the piece went out, and is in the records)
        assert taken is not None
        assert taken[4] == ["a"]
        assert stand.transport.written == [frame(event("a"))]
    assert stand.handed == []


def test_a_failed_read_is_queued_with_the_words_pull_would_give_it() -> None:
    import errno
    import os

    from steadystream.stamped.target import reason

    left, right = socket.socketpair()
    with left, right:
        right.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left.send(b"unread")  # closing a socket with unread bytes resets the other end
        right.close()
        pending: deque[tuple[int, bytes]] = deque()
        drained: list[list[tuple[int, bytes]]] = []
        conn = SimpleNamespace(
            _rescuer=None,
            _closed=False,
            drain=lambda: drained.append(list(pending)),
        )
        make = native.NativeLane
        assert make is not None
        lane = make(
            conn, fd=left.fileno(), kernel=True, offset_ns=0, pending=pending, queued=deque()
        )
        lane.bind(lambda data: None)
        lane.readable()
        expected = reason(ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)))
        assert drained == [[(-1, expected.encode())]]


class _Reading:
    """A connection stand-in the reactor's lanes read for: what drain() got, in order."""

    def __init__(self, name: str, log: list[tuple[str, bytes]]) -> None:
        self._rescuer = None
        self._closed = self._complete = self._stopped = False
        self._error = self._head = None  # (in its head: the lane queues each read for drain)
        self.pending: deque[tuple[int, bytes]] = deque()
        self.name = name
        self.log = log

    def drain(self) -> None:
        while self.pending:
            self.log.append((self.name, self.pending.popleft()[1]))


def _reading_lane(conn: _Reading, fd: int) -> Any:
    make = native.NativeLane
    assert make is not None
    lane = make(conn, fd=fd, kernel=False, offset_ns=0, pending=conn.pending, queued=deque())
    lane.bind(lambda data: None)
    return lane


def test_a_reactor_reads_every_readable_lane_in_one_run_and_only_those() -> None:
    reactor = native._native.Reactor()  # type: ignore[union-attr]
    log: list[tuple[str, bytes]] = []
    pairs = [socket.socketpair() for _ in range(3)]
    try:
        for name, (ours, _) in zip("abc", pairs, strict=True):
            ours.setblocking(False)
            reactor.add(ours.fileno(), _reading_lane(_Reading(name, log), ours.fileno()))
        assert reactor.watched == 3
        pairs[0][1].send(b"to a")
        pairs[2][1].send(b"to c")
        reactor.run()
        assert sorted(log) == [("a", b"to a"), ("c", b"to c")]
        reactor.remove(pairs[0][0].fileno())
        reactor.remove(pairs[0][0].fileno())  # (twice: nothing happens)
        pairs[0][1].send(b"again")
        log.clear()
        reactor.run()
        assert log == []  # removed: no longer read
    finally:
        reactor.close()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
    assert reactor.watched == 0


def test_a_lane_that_stops_another_in_the_same_run_leaves_it_unread() -> None:
    reactor = native._native.Reactor()  # type: ignore[union-attr]
    log: list[tuple[str, bytes]] = []
    (a, a_peer), (b, b_peer) = socket.socketpair(), socket.socketpair()
    try:
        for sock in (a, b):
            sock.setblocking(False)

        class Stopping(_Reading):
            def drain(self) -> None:
                super().drain()
                reactor.remove(a.fileno())
                reactor.remove(b.fileno())  # whichever came first stops the other

        reactor.add(a.fileno(), _reading_lane(Stopping("a", log), a.fileno()))
        reactor.add(b.fileno(), _reading_lane(Stopping("b", log), b.fileno()))
        a_peer.send(b"x")
        b_peer.send(b"y")
        reactor.run()
        assert len(log) == 1  # the other's event in the same batch was dropped
    finally:
        reactor.close()
        for sock in (a, a_peer, b, b_peer):
            sock.close()


def test_a_reactor_takes_only_lanes_and_a_closed_one_refuses_more() -> None:
    reactor = native._native.Reactor()  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        reactor.add(0, object())
    reactor.close()
    reactor.run()  # (closed: nothing to read)
    with pytest.raises(RuntimeError, match="closed"):
        reactor.add(0, _reading_lane(_Reading("x", []), 0))


def test_every_attribute_the_lane_reads_by_name_is_there() -> None:
    # The C reads the Python objects' attributes by name: a rename on this side would fail
    # only at run time, on a path some test may not take. Each name it interns is a key of
    # the chunks it parses or an attribute of one of the objects it is given.
    import inspect
    import re
    from pathlib import Path

    from steadystream.gateway.attempt import Attempt
    from steadystream.gateway.events import EventCutter
    from steadystream.gateway.watchdog import Watchdog
    from steadystream.gateway.writers import RawOutlet
    from steadystream.stamped import StallRescuer, StampedConnection

    source = (Path(native.__file__).parent / "_lane.c").read_text(encoding="utf-8")
    names = set(re.findall(r'INTERN\(s_\w+, "(\w+)"\)', source))
    chunk_keys = {"error", "usage", "choices", "object", "finish_reason", "delta", "role"}
    chunk_keys |= {"content", "text"}
    owners = (StampedConnection, Attempt, EventCutter, Watchdog, RawOutlet, StallRescuer, deque)

    def has(owner: type, name: str) -> bool:
        if hasattr(owner, name):  # a slot, a method
            return True
        return owner is not deque and f"self.{name} =" in inspect.getsource(owner)

    assert len(names) > 30
    missing = sorted(n for n in names - chunk_keys if not any(has(o, n) for o in owners))
    assert not missing, f"the lane reads names no object has: {missing}"


def test_the_lane_reads_as_much_at_once_as_the_connection() -> None:
    from steadystream.stamped import connection

    assert native._native is not None
    assert native._native.READ_SIZE == connection.READ_SIZE
