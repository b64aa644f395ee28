"""Keep kernel stamps exact while the event loop is stalled: drain sockets from a thread.

(The same thread also tells the loop of sockets that broke, which uvloop's ``add_reader``
never calls back for: the loop then reads them to the end itself, ``hang_up``.)

A kernel stamp belongs to the newest segment a read copied from, and segments that wait
together in a receive queue are merged under the newest stamp. While the event loop keeps
up, every event is read before the next one arrives and its stamp is exact. When the loop
stalls (a long callback, a garbage collection, a blocked call), events pile up and would
share one stamp. So while the loop's heartbeat is late by more than ``stall_ns``, a thread
reads the waiting sockets itself (``recvmsg`` keeps the kernel's stamp whoever calls it) and
queues the reads for the loop, which parses them in order when it runs again.

Free when all is well: the thread sleeps in the kernel on a timer the loop's heartbeat keeps
pushing back (:mod:`steadystream.stamped.deadline`), and on the watched sockets' errors; it
wakes only when the loop misses its heartbeat by ``stall_ns`` (then it looks every
``poll_s`` until the loop is back) or a socket breaks. It exits when no connection is open.
It stays out of a loop that is late but working through a burst of reads: that loop lets go
of the GIL on every socket call, and a thread reading beside it would only contend (tried:
the client's lag grew). A stall spent running Python holds the GIL; the thread then reads
only at the interpreter's switch interval (5 ms), which still beats a merged stamp. Events
that waited together anyway are counted (``meta.stamps_shared``).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
import time
import weakref
from typing import ClassVar, Protocol

from steadystream.stamped.deadline import DeadlineTimer

__all__ = ["StallRescuer"]

_STALL_NS = 15_000_000  # well under the 50 ms between a stream's events at 20 a second
_POLL_S = 0.008


class Drainable(Protocol):
    def fileno(self) -> int: ...

    def pull(self) -> bool: ...

    def drain(self) -> None: ...

    def hang_up(self) -> None: ...

    @property
    def wants_rescue(self) -> bool: ...


class StallRescuer:
    """One per event loop: watches the loop's heartbeat and drains sockets while it stalls."""

    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StallRescuer]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        stall_ns: int = _STALL_NS,
        poll_s: float = _POLL_S,
    ) -> None:
        self.loop = loop
        self.stall_ns = stall_ns
        self.poll_s = poll_s
        self.rescued_reads = 0
        self.loop_work = 0  # reads and hand-overs the loop did (counted by the connections)
        self._watched: dict[int, Drainable] = {}
        self._lock = threading.Lock()
        self._poller = select.epoll()  # kernel-stamped connections: what is readable
        self._errors = select.epoll()  # every connection: reset or hung up (mask 0)
        self._beat_ns = time.monotonic_ns()
        self._beat_work = 0  # loop_work at the last heartbeat
        self._thread: threading.Thread | None = None
        self._beating = False
        try:
            self._timer: DeadlineTimer | None = DeadlineTimer()
        except (OSError, AttributeError):  # no timerfd: the thread looks every poll_s instead
            self._timer = None

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop) -> StallRescuer:
        rescuer = cls._by_loop.get(loop)
        if rescuer is None:
            rescuer = cls._by_loop[loop] = cls(loop)
        return rescuer

    def watch(self, conn: Drainable, *, rescue: bool) -> None:
        """Watch ``conn`` for a reset; with ``rescue``, also read it while the loop stalls."""
        fd = conn.fileno()
        with self._lock:
            self._watched[fd] = conn
            _register(self._errors, fd, 0)  # epoll reports errors and hang-ups whatever the mask
            if rescue:
                _register(self._poller, fd, select.EPOLLIN)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="steadystream-stall-rescuer", daemon=True
                )
                self._thread.start()
        if not self._beating:
            self._beating = True
            self._beat()

    def forget(self, conn: Drainable) -> None:
        fd = conn.fileno()
        with self._lock:
            if self._watched.get(fd) is conn:
                del self._watched[fd]
                for poller in (self._poller, self._errors):
                    with contextlib.suppress(OSError):
                        poller.unregister(fd)

    def _beat(self) -> None:
        self._beat_ns = time.monotonic_ns()
        self._beat_work = self.loop_work
        if self._timer is not None:
            self._timer.arm(self.stall_ns)
        if self._watched:
            self.loop.call_later(self.poll_s, self._beat)
        else:
            self._beating = False

    def _run(self) -> None:
        timer = self._timer
        waiter = select.epoll()
        waiter.register(self._errors.fileno(), select.EPOLLIN)
        if timer is not None:
            waiter.register(timer.fileno(), select.EPOLLIN)
        try:
            while self._round(waiter):
                pass
        finally:
            waiter.close()

    def _round(self, waiter: select.epoll) -> bool:
        """Wait for a missed heartbeat or a broken socket, then act; False once done."""
        timer = self._timer
        if timer is None:  # no timerfd (and no kernel stamps to rescue): errors only
            time.sleep(self.poll_s)
        else:
            # Asleep in the kernel, without the GIL, until the loop misses its heartbeat.
            fired = waiter.poll(1.0)
            if any(fd == timer.fileno() for fd, _ in fired):
                timer.clear()
                self._rescue_while_stalled()
        return self._look(working=True)

    def _rescue_while_stalled(self) -> None:
        # Work since the last heartbeat: a loop that read or handed on while late is working.
        seen = self._beat_work
        while time.monotonic_ns() - self._beat_ns > self.stall_ns:
            # A loop working through a burst (reading all the while) is late but not stalled:
            # reading beside it would only contend for the GIL, which it lets go of on every
            # socket call. A loop that did nothing since our last look is stalled.
            working, seen = self.loop_work != seen, self.loop_work
            if not self._look(working=working):
                return
            time.sleep(self.poll_s)

    def _look(self, *, working: bool) -> bool:
        """Report broken sockets; rescue readable ones if the loop is stalled and idle."""
        with self._lock:
            if not self._watched:
                self._thread = None
                return False
            # uvloop's add_reader never calls back for a socket the peer reset (libuv
            # stops the poll on the error), however much is left to read before the reset:
            # the loop is told, and reads such a socket to its end without being called.
            broken = []
            for fd, _ in self._errors.poll(0):
                self._errors.unregister(fd)
                if (conn := self._watched.get(fd)) is not None:
                    broken.append(conn)
            stale = time.monotonic_ns() - self._beat_ns > self.stall_ns
            ready = []
            if stale and not working:
                ready = [self._watched.get(fd) for fd, _ in self._poller.poll(0)]
        rescued = [conn for conn in ready if conn is not None and conn.wants_rescue and conn.pull()]
        if rescued or broken:
            self.rescued_reads += len(rescued)
            # One wake-up of the loop per round, not one per connection.
            try:
                self.loop.call_soon_threadsafe(self._drain_rescued, rescued, broken)
            except RuntimeError:  # the loop was closed with connections left open
                with self._lock:
                    self._watched.clear()
                    self._thread = None
                return False
        return True

    def _drain_rescued(self, conns: list[Drainable], broken: list[Drainable]) -> None:
        # On the loop. Parsing what the thread read is work too, or a loop busy with rescued
        # reads (whose sockets are empty) would look stalled, and the thread would go on
        # reading for it, burst after burst.
        self.loop_work += 1
        for conn in conns:
            conn.drain()
        for conn in broken:
            conn.hang_up()


def _register(poller: select.epoll, fd: int, mask: int) -> None:
    try:
        poller.register(fd, mask)
    except FileExistsError:  # a closed connection's number, reused
        poller.modify(fd, mask)
