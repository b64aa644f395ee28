"""One streamed HTTP/1.1 exchange whose body arrives with each read's arrival stamp.

The socket is read straight from the event loop (``loop.add_reader``), with ``recvmsg`` and
the kernel's receive stamp (``kernel`` stamps) or with ``recv`` and the clock read when the
loop got to it (``user`` stamps, where the kernel gives none). httptools parses the
response (status, headers, chunked or content-length or close-delimited body); nothing
here parses HTTP by hand. The body is handed to a sink read by read, each read with its
stamp, before anything else looks at it, from the loop's read callback: a reader that
cannot keep up pauses the reads (:meth:`StampedConnection.pause_reading`), and the kernel's
buffers and TCP flow control slow the server.

Failures are the project's exceptions, with messages a person can act on:

- :class:`UpstreamConnectError`: DNS, refused, unreachable, connect timeout, TLS;
- :class:`UpstreamStreamError`: reset or closed before the body ended, read timeout;
- :class:`ProtocolError`: bytes that are not HTTP/1.1.

An HTTP error status is not an exception here: the caller reads the head and decides.

Written once, here, in Python; where the package was built with a compiler it also runs
compiled by Cython (``_connection_c``, its types in ``_connection_c.pxd``;
:mod:`steadystream._build`). The connection reads only its own fields and what it is given.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import threading
from collections.abc import Callable, Mapping

import httptools

from steadystream._clock import Clock
from steadystream._exceptions import (
    ProtocolError,
    UpstreamConnectError,
    UpstreamStreamError,
)
from steadystream.stamped.kernel import (
    ANCILLARY_SIZE,
    WallToClock,
    enable_stamps,
    kernel_stamps_available,
    stamp_from_ancillary,
)
from steadystream.stamped.modes import StampMode
from steadystream.stamped.rescue import StallRescuer
from steadystream.stamped.target import (
    Resolve,
    ResponseHead,
    Target,
    connect,
    phrase,
    reason,
)
from steadystream.stamped.tls import TlsSession, default_context

__all__ = ["BodySink", "StampedConnection"]

READ_SIZE = 1 << 16
_HEAD_LIMIT = 64 * 1024  # bytes of status line and headers we accept (and of trailer fields)
_HEAD_FRAME = len(b"HTTP/1.1 200 \r\n\r\n")  # a head's bytes besides its reason and headers
_EARLY_LIMIT = 1 << 20  # body bytes held between the head and the caller's sink
_RESCUE_BACKLOG = 64  # reads the rescuer may queue for a stalled loop (64 KiB each at most)

BodySink = Callable[[int, bytes], bool]
"""Takes ``(stamp_ns, body bytes)``; returns True to stop reading (the rest is not wanted)."""


class StampedConnection:
    """A connection for one request and its streamed response; closed after it."""

    __slots__ = (
        "_closed",
        "_complete",
        "_draining",
        "_early",
        "_early_bytes",
        "_error",
        "_framed",
        "_head",
        "_head_bytes",
        "_head_read",
        "_header_name",
        "_headers",
        "_hung_up",
        "_interim",
        "_last_activity",
        "_lock",
        "_loop",
        "_now_ns",
        "_offset_ns",
        "_parser",
        "_paused",
        "_pending",
        "_read_timeout_s",
        "_reading",
        "_rescuer",
        "_sink",
        "_sock",
        "_stamp",
        "_stopped",
        "_timer",
        "_tls",
        "_waiter",
        "_wall",
        "clock",
        "mode",
        "target",
        "unstamped_reads",
    )

    def __init__(
        self,
        sock: socket.socket,
        target: Target,
        clock: Clock,
        mode: StampMode,
        *,
        tls: TlsSession | None,
        read_timeout_s: float | None,
    ) -> None:
        self.target = target
        self.clock = clock
        self.mode = mode
        self.unstamped_reads = 0  # kernel mode: reads the kernel gave no stamp (clock used)
        self._sock = sock
        self._tls = tls
        self._read_timeout_s = read_timeout_s
        self._loop = asyncio.get_running_loop()
        self._wall = WallToClock(clock.now_ns) if mode is StampMode.KERNEL else None
        # What each read needs, bound once: a kernel stamp is wall-clock time, and the clock
        # the rest of the stream is on is ``clock``.
        self._now_ns = clock.now_ns
        self._offset_ns = self._wall.offset_ns if self._wall is not None else 0
        self._draining = False
        self._pending: collections.deque[tuple[int, bytes]] = collections.deque()
        self._lock = threading.Lock()  # the read and its queueing, shared with the rescuer
        self._reading = False
        self._hung_up = False  # the socket broke: read to its end by the loop, uncalled
        self._closed = False
        self._stamp = 0
        self._head_bytes = 0  # of the heads so far (interim ones too), as the parser gave them
        # Bytes fed to the parser while it may hold a line of them (httptools keeps a header
        # line, and the status line, until its end): before the head, and from the last
        # chunk's size line to the trailer fields' end. -1 while the body comes.
        self._head_read = 0
        self._headers: dict[str, str] = {}
        self._header_name = b""
        self._head: ResponseHead | None = None
        self._interim = False  # parsing a 1xx answer, which the final one follows
        self._framed = False  # chunked or content-length: an early close is a truncation
        self._early: list[tuple[int, bytes]] = []
        self._early_bytes = 0
        self._sink: BodySink | None = None
        self._paused = False  # the sink's reader asked the reads to wait
        self._complete = False
        self._stopped = False
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._last_activity = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._rescuer: StallRescuer | None = None
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    # -- opening and sending -------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        target: Target,
        clock: Clock,
        mode: StampMode,
        *,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float | None = 120.0,
        ssl_context: ssl.SSLContext | None = None,
        resolve: Resolve | None = None,
    ) -> StampedConnection:
        """Connect (and shake hands, for https); raises :class:`UpstreamConnectError`."""
        where = target.origin
        try:
            async with asyncio.timeout(connect_timeout_s):
                sock = await connect(target, where, resolve)
                tls = None
                try:
                    if mode is StampMode.KERNEL:
                        # Linux turns stamping on for the host lazily: without the probe's
                        # socket keeping it on, the first packets of a process's first
                        # stream may come unstamped (asked once per process, then cached).
                        kernel_stamps_available()
                        enable_stamps(sock)
                    if target.secure:
                        context = ssl_context or default_context()
                        tls = TlsSession(sock, context, target.host, target.port)
                        await tls.handshake(where)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            raise UpstreamConnectError(f"cannot connect to {where}: connect timed out") from None
        return cls(sock, target, clock, mode, tls=tls, read_timeout_s=read_timeout_s)

    async def send(self, method: str, headers: Mapping[str, str], body: bytes = b"") -> int:
        """Send the request; returns the clock instant its last byte went to the kernel."""
        lines = [f"{method} {self.target.path} HTTP/1.1", f"Host: {self.target.host_header}"]
        for name, value in headers.items():
            if any(c in name or c in value for c in "\r\n\0") or not name:
                raise ValueError(f"header {name!r} has a line break or NUL in its name or value")
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {len(body)}")
        lines.append("Connection: close")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        try:
            if self._tls is not None:
                await self._tls.send(request)
            else:
                await self._loop.sock_sendall(self._sock, request)
        except OSError as exc:
            raise UpstreamStreamError(f"request failed: {reason(exc)}") from exc
        sent = self.clock.now_ns()
        self._start_reading()
        return sent

    # -- reading -------------------------------------------------------------------------

    async def head(self) -> ResponseHead:
        """Wait for the status line and headers, at most the read timeout in all.

        A server that dribbles its head a byte at a time keeps the connection busy, not
        idle: the whole head gets the read timeout, not each of its reads.
        """
        try:
            async with asyncio.timeout(self._read_timeout_s):
                while self._head is None:
                    self._check_open()
                    # Not _wait(): a failure found after the head, in the same drain (a reset
                    # or an early close behind a whole answer), is the body's to report,
                    # once its pieces are handed on. Raised here, it would turn an answer
                    # the gateway holds into "cannot reach upstream".
                    await self._woken()
        except TimeoutError:
            error = UpstreamStreamError(
                "read timed out: the response head took longer than the read timeout"
            )
            self._fail(error)
            raise error from None
        if self._tls is not None:
            # Its ticket came right after the handshake: kept now, the next connections there
            # resume, not only those opened after this stream ended (500 streams opened
            # together each made a full handshake: ~0.7 ms of CPU and a chain to verify).
            self._tls.keep()
        return self._head

    async def stream_body(self, sink: BodySink) -> int:
        """Hand the body to ``sink`` read by read; returns the stamp of the last read.

        Returns when the body ended, or when ``sink`` asked to stop (the connection is then
        closed: the server sees the client leave). Raises :class:`UpstreamStreamError` when
        the connection broke before the body ended, or no bytes came within the read timeout.
        The sink is called from the loop's read callback, so it must not block; it may pause
        the reads meanwhile (:meth:`pause_reading`).
        """
        await self.head()
        self._sink = sink
        early, self._early = self._early, []
        for stamp, data in early:
            if sink(stamp, data):
                self._stop()
                return stamp
        if not self._ended:
            self._start_reading()
            while not self._ended:
                await self._wait()
        return self._stamp

    def pause_reading(self) -> None:
        """Leave the socket to the kernel until :meth:`resume_reading` (a sink whose reader
        cannot keep up): its buffers fill and TCP flow control slows the server, so a slow
        reader costs no memory here. Reads already taken from the socket still go to the
        sink."""
        self._paused = True
        self._stop_reading()

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            if self._sink is not None and not self._ended:
                self._start_reading()

    async def read_body(self, limit: int) -> bytes:
        """Up to ``limit`` bytes of the body (an error message), then stop."""
        keeper = _Keeper(limit)
        await self.stream_body(keeper)
        return b"".join(keeper.kept)

    def clock_step_ns(self) -> int:
        """How far the wall clock stepped while this connection was open (kernel stamps)."""
        return self._wall.step_ns() if self._wall is not None else 0

    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def wants_rescue(self) -> bool:
        """Few reads queued, and no reader that asked the socket to wait (paused)."""
        return len(self._pending) < _RESCUE_BACKLOG and not self._paused

    def close(self) -> None:
        if self._closed:
            return
        self._stop_reading()
        if self._rescuer is not None:
            self._rescuer.forget(self)
        with self._lock:
            self._closed = True
            self._sock.close()
        if self._tls is not None and self._error is None:
            self._tls.keep(final=True)  # (if no ticket was kept at the head)
        if not self._draining:  # else drain() lets go of them once the parser has returned
            self._let_go()
        self._wake(UpstreamStreamError("the connection was closed"))

    @property
    def _ended(self) -> bool:
        return self._complete or self._stopped

    async def _wait(self) -> None:
        self._check_open()
        await self._woken()
        if self._error is not None:
            raise self._error

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise UpstreamStreamError("the connection was closed")

    async def _woken(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self, error: BaseException | None = None) -> None:
        if error is not None and self._error is None and not self._ended:
            self._error = error
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _start_reading(self) -> None:
        if self._reading or self._closed or self._paused:
            return
        self._reading = True
        if self._hung_up:
            self._loop.call_soon(self._read_hung_up)
        else:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
        if self._pending:  # read while paused (by the rescuer): parse it now, not on new bytes
            self._loop.call_soon(self.drain)
        if self._read_timeout_s is not None:
            self._last_activity = self._loop.time()
            self._timer = self._loop.call_at(
                self._last_activity + self._read_timeout_s, self._check_timeout
            )
        if self._rescuer is None:
            self._rescuer = StallRescuer.for_loop(self._loop)
            self._rescuer.watch(self, rescue=self.mode is StampMode.KERNEL)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            if not self._hung_up:
                self._loop.remove_reader(self._sock.fileno())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _stop(self) -> None:
        self._stopped = True
        self.close()

    def _check_timeout(self) -> None:
        assert self._read_timeout_s is not None
        idle = self._loop.time() - self._last_activity
        if idle >= self._read_timeout_s:
            self._timer = None
            self._fail(UpstreamStreamError("read timed out: no bytes within the read timeout"))
        else:
            self._timer = self._loop.call_at(
                self._last_activity + self._read_timeout_s, self._check_timeout
            )

    def _fail(self, error: BaseException) -> None:
        self._stop_reading()
        self._wake(error)

    def pull(self) -> bool:
        """Read what the socket holds into the queue; True if something was queued.

        Runs on the loop and, while the loop is stalled, on the rescuer's thread: the lock
        keeps reads and their place in the queue in one order.
        """
        with self._lock:
            if self._closed:
                return False
            return self._pull()

    def _pull(self) -> bool:
        try:
            if self._wall is not None:
                data, ancillary, _, _ = self._sock.recvmsg(READ_SIZE, ANCILLARY_SIZE)
                wall = stamp_from_ancillary(ancillary)
                if wall is None:
                    stamp = self._now_ns()
                    self.unstamped_reads += data != b""
                else:
                    stamp = wall + self._offset_ns  # (WallToClock.to_clock, inline)
            else:
                data = self._sock.recv(READ_SIZE)
                stamp = self._now_ns()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._pending.append((-1, reason(exc).encode()))
            return True
        self._pending.append((stamp, data))
        return True

    def hang_up(self) -> None:
        """The socket broke (the rescuer saw its error or hang-up): read it to its end here.

        uvloop never calls a reader back for a socket with an error pending (libuv stops
        polling it), however much the peer sent before its reset: those bytes, and the reset
        behind them, would wait for the read timeout. A broken socket never blocks a read
        (bytes, then the error, then the end), so the loop reads it one read per pass until
        the body ends or the reader asks it to wait (a full queue), with no callback at all.
        """
        if self._hung_up or self._closed:
            return
        self._hung_up = True
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._loop.call_soon(self._read_hung_up)

    def _read_hung_up(self) -> None:
        if not self._reading or self._closed:
            return  # stopped meanwhile: _start_reading comes back here
        if self._rescuer is not None:
            self._rescuer.loop_work += 1
        if self.pull():
            self.drain()
            if self._reading and not self._closed:
                self._loop.call_soon(self._read_hung_up)
        else:  # nothing to read after all: wait to be called, as before
            self._hung_up = False
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        rescuer = self._rescuer
        if rescuer is not None:
            rescuer.loop_work += 1
        self._read_now()

    def _read_now(self) -> None:
        if self.pull():
            self.drain()

    def drain(self) -> None:
        """Parse the queued reads in order (on the loop; the rescuer schedules it too)."""
        pending = self._pending
        if self._read_timeout_s is not None and pending:
            self._last_activity = self._loop.time()
        self._draining = True
        try:
            self._drain(pending)
        finally:
            self._draining = False
            if self._closed:
                self._let_go()
        if self._complete or self._stopped:  # (_ended, without the call: per read)
            pending.clear()
            self._stop_reading()
            self._wake()
        elif self._head is None or self._sink is None or self._error is not None:
            self._wake()  # (the sink took the body: nobody waits for it but the end)

    def _let_go(self) -> None:
        # The parser calls back into this connection and the sink may be one of its
        # methods: both are cycles, which would wait for the garbage collector.
        self._parser = None
        self._sink = None
        if self._error is not None:  # raised, its traceback holds frames whose self is this
            self._error.__traceback__ = None

    def _drain(self, pending: collections.deque[tuple[int, bytes]]) -> None:
        while (
            pending
            and self._error is None
            and not (self._complete or self._stopped)  # (_ended, without the call)
            and not self._closed
        ):
            parser = self._parser
            assert parser is not None  # open: it goes only with the connection
            stamp, data = pending.popleft()
            if stamp < 0:
                self._broken(data.decode())
                break
            self._stamp = stamp
            tls = self._tls
            if not data:
                if tls is not None and tls.inside_record:
                    self._broken("a TLS record was cut short by the connection's end")
                else:
                    self._end_of_stream()
                break
            try:
                if tls is not None:
                    data = tls.decrypt(data)
                if self._head_read >= 0:
                    self._head_read += len(data)
                parser.feed_data(data)
                if self._head_read > _HEAD_LIMIT:
                    # A line that never ends (the status line, a header, a trailer field)
                    # is cut off by its size: httptools would hold it all, copied anew on
                    # each read.
                    what = "headers" if self._head is None else "trailer fields"
                    raise ProtocolError(f"the response {what} are larger than {_HEAD_LIMIT} bytes")
            except (
                httptools.HttpParserError,
                httptools.HttpParserUpgrade,
                ProtocolError,
                UpstreamStreamError,
            ) as exc:
                self._feed_failed(exc)
            if tls is not None and tls.end is not None and not (self._complete or self._stopped):
                # The TLS stream ended behind the plaintext just fed: a close_notify ends it as
                # the socket's end would (the server may keep the socket open), a failure
                # fails it. Either way no read after it is parsed.
                if tls.end:
                    self._fail(UpstreamStreamError(tls.end))
                else:
                    self._end_of_stream()
                break
            if self._head is not None and self._sink is None and self._reading:
                # The caller decides what to do with the body once it has seen the head.
                self._stop_reading()
                break

    def _feed_failed(self, exc: BaseException) -> None:
        """A feed of the parser raised ``exc``: fail the connection with the right error,
        or raise it again when it is none of ours."""
        if isinstance(exc, httptools.HttpParserUpgrade):  # (no HttpParserError)
            self._fail(
                ProtocolError(
                    "the server switched protocols (101, or an Upgrade): no HTTP answer to read"
                )
            )
        elif isinstance(exc, httptools.HttpParserCallbackError):
            # Raised by our callbacks or the caller's sink: that error, not the parser's.
            self._fail(exc.__context__ or exc)
        elif isinstance(exc, httptools.HttpParserError):
            self._fail(ProtocolError(f"the server's response is not valid HTTP/1.1: {exc}"))
        elif isinstance(exc, ProtocolError | UpstreamStreamError):
            self._fail(exc)
        else:
            raise exc

    def _end_of_stream(self) -> None:
        if self._head is not None and not self._framed:
            self.on_message_complete()  # a close-delimited body ends with the connection
        elif self._head is None:
            self._fail(UpstreamStreamError("the server closed the connection without answering"))
        else:
            self._fail(
                UpstreamStreamError(
                    "connection lost mid-stream: the server closed the connection before "
                    "the body ended"
                )
            )

    def _broken(self, reason: str) -> None:
        if self._head is None:
            self._fail(UpstreamStreamError(f"the server closed the connection: {reason}"))
        else:
            self._fail(UpstreamStreamError(f"connection lost mid-stream: {reason}"))

    # -- httptools callbacks -------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        if self._head is None:
            self._count_head(len(reason))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._head is not None:
            return  # trailer fields after the last chunk (or a second answer's): not the head's
        self._count_head(len(name) + len(value) + 4)
        if name:
            self._header_name = name
        key = self._header_name.decode("latin-1").lower()
        previous = self._headers.get(key, "") if not name else ""
        self._headers[key] = previous + value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self._complete:
            return  # bytes after the response are not a second one
        self._count_head(_HEAD_FRAME)
        parser = self._parser
        assert parser is not None  # called back by it, from drain()
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            # An interim answer (100 Continue, 103 Early Hints): the final one follows.
            self._interim = True
            self._headers = {}
            return
        headers = self._headers
        # Chunked as llhttp reads it: the last coding of the last Transfer-Encoding line is
        # "chunked". Any other ("xchunked", "chunked, identity") leaves the body to the close.
        coding = headers.get("transfer-encoding", "").rpartition(",")[2].lstrip(" \t").rstrip(" ")
        self._framed = "content-length" in headers or coding.lower() == "chunked"
        reason = phrase(status)
        self._head = ResponseHead(status, reason, headers, self._stamp)
        self._head_read = -1

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > _HEAD_LIMIT:
            raise ProtocolError(f"the response headers are larger than {_HEAD_LIMIT} bytes")

    def on_chunk_header(self) -> None:
        self._head_read = 0  # the last chunk's trailer fields may follow: counted till body

    def on_body(self, body: bytes) -> None:
        self._head_read = -1
        if self._stopped or self._complete:
            return
        sink = self._sink
        if sink is None:
            self._early_bytes += len(body)
            if self._early_bytes > _EARLY_LIMIT:
                raise ProtocolError("too much body before the caller asked for it")
            self._early.append((self._stamp, body))
        elif sink(self._stamp, body):
            self._stop()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._complete = True


class _Keeper:
    """The sink of :meth:`StampedConnection.read_body`: the first ``limit`` bytes.

    A class, not a closure: compiled, a coroutine's closure holds every local of the
    coroutine, the closure itself among them, and the cycle would wait for the collector.
    """

    __slots__ = ("kept", "limit", "size")

    def __init__(self, limit: int) -> None:
        self.kept: list[bytes] = []
        self.limit = limit
        self.size = 0

    def __call__(self, _stamp: int, data: bytes) -> bool:
        piece = data[: self.limit - self.size]
        self.kept.append(piece)
        self.size += len(piece)
        return self.size >= self.limit
