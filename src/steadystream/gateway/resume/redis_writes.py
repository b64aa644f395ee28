"""The Redis store's writes: the streams of this process, batched into one call at a time.

:class:`~steadystream.gateway.resume.redis_store.RedisStore` reads and answers for every
process; this writes what this process runs (its opens, events, ends, aliases and the marks
of streams that cannot be resumed) with no work for Redis on the relay's path.

A stream's events are already in this process's log (the memory store's, which the tee
writes to), so they are read from there (:meth:`RedisWriter.opened` is given the log). One
writer task, every 50 ms, takes what is new in the logs that got events since it last
looked (a log says so once, :meth:`StreamLog.tell_news`: one test on the relay's path, no
call, and no look at the logs with nothing new), and sends it, with the opens and ends
queued meanwhile, as one call of a Lua script: one command and one round trip whatever the
number of streams and events (a command per event cost the client more CPU than the rest of
the relay), the events of a stream in one operation, and the next batch while that one is
out. It sends at a quiet moment of the loop, between the bursts of reads a batching engine's
steps bring (75 ms late at most), not in their middle, where it would delay them. At a
stream's end what its log holds and Redis does not yet is queued at once, before the end, so
nothing the memory store lets go of later is missed. A stream the memory store does not keep
(``resume.max_streams`` streams all running) has its events handed here read by read
(:meth:`RedisWriter.append`), queued, and sent the same way.

Each batch is bounded (``resume.max_stream_bytes`` times 16: what logs hold past it, and what
ended streams queued past it, waits for the next batch; handed events past it make their
stream unresumable). When Redis does not answer, the streams of the lost writes go on
*unresumable* (their readers get 410, never a gap): said in the log,
``steadystream_resume_store_up`` and ``/healthz``. Nothing else fails. Tried again at most
once a second while Redis is down.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from steadystream._clock import NS_PER_S, Clock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.log import StreamLog
from steadystream.gateway.resume.store import StreamInfo

__all__ = ["RedisWriter"]

# A batch takes what the logs and the queue got in this long: each call costs the client
# and Redis (which shares the gateway's cores) a fixed part, and each stream in a batch a
# part of its own, so fewer calls with more events a stream cost less. A loaded gateway
# (benchmarks/bench_resume.py, 500 streams of an event each 50 ms) relayed 0.82-0.84 of
# resume off's events per CPU-second with calls every 8 ms, 0.84-0.88 every 25 ms (Redis
# cost 7-9 % more than the memory store alone), 0.93-0.95 every 50 ms (2-4 % more): at
# 50 ms a stream has an event or two in each call, at 25 ms mostly one or none. Readers
# on another replica see live events this much later, 50-125 ms with the quiet moment (a
# reader on this process reads its own copy).
_COALESCE_S = 0.05
# A batch waits for a quiet moment: one pass of the loop (a sleep(0)) shorter than this, so
# it goes between the bursts of a batching engine's steps, not in their middle; it waits
# no longer than _QUIET_MOST_NS for one.
_QUIET_NS = 1_000_000
_QUIET_MOST_NS = 75_000_000
_RETRY_NS = NS_PER_S  # while Redis is down, a batch is tried at most this often
_MAX_BROKEN = 10_000  # streams remembered as unresumable, to say so when Redis is back


class RedisWriter:
    """The writes of one process's streams (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        config: ResumeConfig,
        clock: Clock,
        metrics: GatewayMetrics,
        log: logging.Logger,
        *,
        command_s: float,
    ) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics
        self.log = log
        self.command_s = command_s  # a call Redis does not answer in this is a failure
        self.ttl_ms = max(1, config.ttl // 1_000_000)
        self.max_pending = 16 * config.max_stream_bytes
        self._write = client.register_script(_WRITE)
        self._refreshed: dict[str, int] = {}  # when a live stream's keys' TTL was last set
        self.up = True
        self._pending: list[tuple[Any, ...]] = []
        self._pending_bytes = 0
        self._sizes: dict[str, int] = {}  # bytes written per live stream (handed ones)
        # The running streams whose events are read from their log in this process.
        self._sources: dict[str, _Source] = {}
        self._news: list[_Source] = []  # those whose logs got events since last looked at
        self._broken: OrderedDict[str, str] = OrderedDict()  # stream -> why unresumable
        self._retry_at = 0
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None

    def opened(self, info: StreamInfo, source: StreamLog | None = None) -> None:
        """A stream starts. With ``source`` (its log in this process) its events are read from
        there; without, they are handed here (:meth:`append`)."""
        if source is not None:
            kept = self._sources[info.stream_id] = _Source(info.stream_id, source)
            source.tell_news(self._news, kept)
        else:
            self._sizes[info.stream_id] = 0
        self._queue(("open", info), 64)

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        if stream_id in self._broken:
            return
        written = self._sizes.get(stream_id, 0) + size
        self._sizes[stream_id] = written
        if written > self.config.max_stream_bytes:
            self._break(stream_id, "too_large")
            return
        if self._pending_bytes + size > self.max_pending:
            self._break(stream_id, "unresumable")
            return
        self._queue(("append", stream_id, first_id, events), size)

    def ended(self, stream_id: str, how: str, next_id: int) -> None:
        self._sizes.pop(stream_id, None)
        self._refreshed.pop(stream_id, None)
        source = self._sources.pop(stream_id, None)
        if source is not None:
            # What the log holds and Redis does not, now: the memory store may let go of an
            # ended stream's events (to make room) before the next batch.
            self._take(stream_id, source)
        if stream_id not in self._broken:
            self._queue(("end", stream_id, next_id, how), 64)

    def _take(self, stream_id: str, source: _Source) -> None:
        """Queue the events of an ended stream's log not yet taken."""
        encoded = self._new_events(stream_id, source)
        if encoded is not None:
            self._queue(("encoded", stream_id, encoded), len(encoded))

    def _new_events(self, stream_id: str, source: _Source) -> bytes | None:
        """The operation that appends what ``source``'s log holds and Redis does not (the
        events of one stream as one operation); None when there is nothing, or when the log
        let go of its events (then the stream is unresumable here too, for the same reason)."""
        log = source.log
        if log.gone is not None:
            self._break(stream_id, log.gone.reason)
            return None
        events = log.events
        count = len(events)
        taken = source.taken
        if count <= taken or stream_id in self._broken:
            return None
        source.taken = count
        return _appended(source.name, taken + 1, events, taken, count)

    def alias(self, name: str, stream_id: str) -> None:
        self._queue(("alias", name, stream_id), 64)

    def _queue(self, command: tuple[Any, ...], size: int) -> None:
        self._pending.append(command)
        self._pending_bytes += size
        wake = self._wake
        if wake is None:
            self._start()
        elif not wake.is_set():
            wake.set()

    def _start(self) -> None:
        self._wake = asyncio.Event()
        self._wake.set()
        self._writer = asyncio.ensure_future(self._write_batches())

    def _break(self, stream_id: str, reason: str) -> None:
        """No more writes for ``stream_id``; readers are told it cannot be resumed."""
        self._sources.pop(stream_id, None)
        if stream_id in self._broken:
            return
        self._broken[stream_id] = reason
        while len(self._broken) > _MAX_BROKEN:
            self._broken.popitem(last=False)
        self._queue(("gone", stream_id, reason), 64)

    async def _write_batches(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            if not self._sources:
                await wake.wait()
            # What more loop passes bring in the next moments goes in the same call (see
            # _COALESCE_S): the running streams' logs are looked at once a batch.
            await asyncio.sleep(_COALESCE_S)
            await self._quiet_moment()
            wake.clear()
            batch = self._batch()
            if self._pending:
                wake.set()  # (what the batch's bound left for the next one)
            if not batch:
                continue
            if self.clock.now_ns() < self._retry_at:
                self._lost(batch)
                continue
            try:
                async with asyncio.timeout(self.command_s):
                    await self._send(batch)
            except Exception as exc:
                self.down(exc)
                self._lost(batch)
            else:
                if not self.up:
                    self.up = True
                    self.metrics.resume_store_up.set(1)
                    self.log.warning("resume store (redis): reachable again")

    async def _quiet_moment(self) -> None:
        """Wait for a pass of the loop with no burst of reads in it, :data:`_QUIET_MOST_NS`
        at most: a batch sent in the middle of a burst delays the burst's events behind it
        (building the call, and ``redis-server`` running it on the cores the relay shares)."""
        now_ns = self.clock.now_ns
        start = now_ns()
        while True:
            before = now_ns()
            await asyncio.sleep(0)
            after = now_ns()
            if after - before < _QUIET_NS or after - start >= _QUIET_MOST_NS:
                return

    def _batch(self) -> list[tuple[Any, ...]]:
        """What goes in the next call: the opens queued, then what the running streams' logs
        hold that Redis does not (up to the batch's bound: the rest waits for the next), then
        the rest of the queue in its order (ends come after their streams' last events)."""
        queued, self._pending = self._pending, []
        self._pending_bytes = 0
        batch = [command for command in queued if command[0] == "open"]
        opens = len(batch)
        room = self.max_pending
        # Only the logs that got events (or let go of them) since they were last looked
        # at: each tells the list once (StreamLog.tell_news), and is asked again here. (One
        # list, emptied in place: the logs that wait for news hold it.)
        news = self._news[:]
        self._news.clear()
        sources = self._sources
        now = self.clock.now_ns()
        refresh = now - self.ttl_ms * 250_000  # a quarter of the TTL ago
        refreshed = self._refreshed
        for at, source in enumerate(news):
            stream_id = source.stream_id
            if sources.get(stream_id) is not source:
                continue  # ended, or unresumable, since
            if room <= 0:
                self._news += news[at:]  # (the next batch's)
                break
            encoded = self._new_events(stream_id, source)
            if encoded is not None:
                if refreshed.get(stream_id, 0) < refresh:
                    refreshed[stream_id] = now
                    encoded += b"r %s 0 0\n" % source.name
                batch.append(("encoded", stream_id, encoded))
                room -= len(encoded)
            if stream_id in sources:  # (not if the log let go: unresumable)
                source.log.tell_news(self._news, source)
        if opens < len(queued):
            # The rest of the queue in its order, up to the bound too: many streams that end
            # together queue what their logs held, and one call past the bound would hold
            # Redis (every replica's readers) for as long. The rest waits for the next call.
            rest = [command for command in queued if command[0] != "open"]
            for at, command in enumerate(rest):
                if room <= 0:
                    left = rest[at:]
                    self._pending[:0] = left
                    self._pending_bytes += sum(map(_queued_size, left))
                    break
                batch.append(command)
                room -= _queued_size(command)
        return batch

    async def _send(self, batch: list[tuple[Any, ...]]) -> None:
        """The batch as one call of the writer script (:data:`_WRITE`) with one argument
        that holds every operation: one command and one reply whatever the number of streams
        and events (a command, or even an argument, per event costs the client more CPU
        than the rest of the relay does per event)."""
        parts: list[bytes] = []
        add = parts.append
        now = self.clock.now_ns()
        refresh = now - self.ttl_ms * 250_000  # a quarter of the TTL ago
        refreshed = self._refreshed
        for command in batch:
            kind = command[0]
            if kind == "encoded":
                add(command[2])
            elif kind == "append":
                _, stream_id, first_id, events = command
                name = stream_id.encode()
                add(_appended(name, first_id, events, 0, len(events)))
                if refreshed.get(stream_id, 0) < refresh:
                    refreshed[stream_id] = now
                    add(b"r %s 0 0\n" % name)
            elif kind == "open":
                info: StreamInfo = command[1]
                refreshed[info.stream_id] = now
                _record(add, b"o", info.stream_id, 0, f"{info.route}\t{info.tenant}")
            elif kind == "end":
                _, stream_id, last, how = command
                refreshed.pop(stream_id, None)
                _record(add, b"e", stream_id, last, how)
            elif kind == "gone":
                _, stream_id, reason = command
                refreshed.pop(stream_id, None)
                _record(add, b"g", stream_id, 0, reason)
            elif kind == "alias":
                _, name_, stream_id = command
                _record(add, b"l", name_, 0, stream_id)
        await self._write(keys=[], args=[self.ttl_ms, b"".join(parts)])

    def down(self, exc: BaseException) -> None:
        self._retry_at = self.clock.now_ns() + _RETRY_NS
        self.metrics.resume_store_errors.inc()
        if self.up:
            self.up = False
            self.metrics.resume_store_up.set(0)
            self.log.error(
                "resume store (redis) unreachable (%s); streams go on, unresumable",
                type(exc).__name__,
            )

    def _lost(self, batch: list[tuple[Any, ...]]) -> None:
        """The writes of ``batch`` never made it: their streams are not resumable. The marks
        that say so wait for the next batch that gets through."""
        for command in batch:
            kind = command[0]
            if kind == "gone":
                # (Queued, which wakes the writer: with every stream broken nothing else
                # would, and a reader elsewhere would wait on a stream that never ends.)
                self._queue(command, 64)
            elif kind in ("append", "encoded", "open", "end"):
                self._break(command[1].stream_id if kind == "open" else command[1], "unresumable")

    async def close(self) -> None:
        task, self._writer = self._writer, None
        if task is not None:
            if not task.done():
                task.cancel()
            await asyncio.wait({task})
        self._wake = None


# One batch of writes, run in Redis: ARGV[1] the TTL (ms), ARGV[2] the operations, each a
# line "OP NAME NUMBER LENGTH" and LENGTH bytes: a(ppend) stream event-id event, A(ppend
# many) stream first-event-id "[size, ...]<LF>" and the events, r(efresh) stream, o(pen)
# stream 0 "route<TAB>tenant", e(nd) stream last-id how, g(one) stream 0 reason, l (alias)
# name 0 stream. (Keys are built here: one Redis, not a cluster.) A stream's events key
# expires from its first event on: a gateway that dies before the key's first refresh
# leaves nothing behind for good.
_WRITE = """
local ttl = tonumber(ARGV[1])
local blob = ARGV[2]
local pos = 1
local size = #blob
while pos <= size do
  local nl = string.find(blob, '\\n', pos, true)
  local op, s, num, len = string.match(string.sub(blob, pos, nl - 1), '^(%a) (%S+) (%d+) (%d+)$')
  len = tonumber(len)
  local payload = string.sub(blob, nl + 1, nl + len)
  pos = nl + len + 1
  local events = 'ss:' .. s .. ':e'
  local meta = 'ss:' .. s .. ':m'
  if op == 'a' then
    redis.call('XADD', events, '0-' .. num, 'd', payload)
    if num == '1' then redis.call('PEXPIRE', events, ttl) end
  elseif op == 'A' then
    local listed = string.find(payload, '\\n', 1, true)
    local at = listed + 1
    local id = tonumber(num)
    for n in string.gmatch(string.sub(payload, 1, listed - 1), '%d+') do
      n = tonumber(n)
      local event = string.sub(payload, at, at + n - 1)
      redis.call('XADD', events, string.format('0-%d', id), 'd', event)
      at = at + n
      id = id + 1
    end
    if num == '1' then redis.call('PEXPIRE', events, ttl) end
  elseif op == 'r' then
    redis.call('PEXPIRE', events, ttl)
    redis.call('PEXPIRE', meta, ttl)
  elseif op == 'o' then
    local tab = string.find(payload, '\\t', 1, true)
    redis.call('HSET', meta, 'route', string.sub(payload, 1, tab - 1),
      'tenant', string.sub(payload, tab + 1))
    redis.call('PEXPIRE', meta, ttl)
  elseif op == 'e' then
    redis.call('XADD', events, '0-' .. num, 'x', payload)
    redis.call('HSET', meta, 'ended', payload, 'last', num)
    redis.call('PEXPIRE', events, ttl)
    redis.call('PEXPIRE', meta, ttl)
  elseif op == 'g' then
    redis.call('HSET', meta, 'gone', payload)
    redis.call('DEL', events)
    redis.call('PEXPIRE', meta, ttl)
  elseif op == 'l' then
    redis.call('SET', 'ss:a:' .. s, payload, 'PX', ttl)
  else
    return redis.error_reply('unknown operation ' .. tostring(op))
  end
end
return size
"""


class _Source:
    """A running stream whose events the store reads from its log in this process."""

    __slots__ = ("log", "name", "stream_id", "taken")

    def __init__(self, stream_id: str, log: StreamLog) -> None:
        self.stream_id = stream_id
        self.name = stream_id.encode()
        self.log = log
        self.taken = 0  # its events taken for Redis so far (the log's first ``taken``)


def _queued_size(command: tuple[Any, ...]) -> int:
    """What a queued command counts against a batch's bound."""
    kind = command[0]
    if kind == "append":
        return sum(map(len, command[3]))
    return len(command[2]) if kind == "encoded" else 64


def _appended(name: bytes, first_id: int, events: list[bytes], start: int, stop: int) -> bytes:
    """The operation that appends ``events[start:stop]``, the first numbered ``first_id``:
    one event as it is; more as their sizes (one list's text) and then their bytes."""
    if stop - start == 1:
        event = events[start]
        return b"a %s %d %d\n%s" % (name, first_id, len(event), event)
    fresh = events[start:stop]
    sizes = list(map(len, fresh))
    listed = repr(sizes).encode()
    size = len(listed) + 1 + sum(sizes)
    return b"A %s %d %d\n%s\n%s" % (name, first_id, size, listed, b"".join(fresh))


def _record(add: Callable[[bytes], None], op: bytes, name: str, number: int, text: str) -> None:
    payload = text.encode()
    add(b"%s %s %d %d\n" % (op, name.encode(), number, len(payload)))
    add(payload)
