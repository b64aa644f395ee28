"""Streams' events in Redis (or Valkey), shared by every worker and replica of the gateway.

``resume.store: redis://host:port/db``; the client is redis-py's asyncio one (the ``resume``
extra), imported only here. What is kept, per stream ``S`` (docs/gateway.md#resume):

- ``ss:S:e``, a Redis stream: event ``n`` is entry ``0-n`` (its bytes in field ``d``), the end
  an entry with field ``x`` (how it ended);
- ``ss:S:m``, a hash: route, tenant, and ``gone`` (why it cannot be resumed) when it cannot;
- ``ss:S:r``, set for a few seconds by a reader on another process: the owner's grace waits;
- ``ss:k:K`` (an idempotency key's stream and body digest), ``ss:a:A`` (a response's stream).

Everything expires ``resume.ttl`` after its last write.

**Why streams and XREAD, not pub/sub**: a reader on another process must get the kept events
after its last one and then the live ones with nothing lost between the two. With pub/sub
the events published between reading the kept ones and subscribing are lost unless each
reader merges two sources; ``XREAD BLOCK`` from the last id it saw gives both in one ordered
read, and the entry ids are the event ids, so a resume is one command.

**Nothing on the relay's path**: a stream's events are already in this process's log (the
memory store's, which the tee writes to), so the store reads them from there
(:meth:`RedisStore.opened` is given the log) and the relay does no work per read for Redis.
One writer task, every 25 ms, takes what is new in the logs that got events since it last
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
(:meth:`RedisStore.append`), queued, and sent the same way.
Each batch is bounded (``resume.max_stream_bytes`` times 16: what logs hold past it, and what
ended streams queued past it, waits for the next batch; handed events past it make their
stream unresumable). When Redis does not answer, the streams of the lost writes go on
*unresumable* (their readers get 410, never a gap): said in the log,
``steadystream_resume_store_up`` and ``/healthz``. Nothing else fails. A command whose
connection Redis closed under it (a restart) is sent once more, on a new connection.
Tried again at most once a second while Redis is down.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from steadystream._clock import NS_PER_S, Clock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.log import StreamGone, StreamLog
from steadystream.gateway.resume.store import REFUSED, Claim, StreamInfo

__all__ = ["RedisStore"]

_CONNECT_S = 1.0
_COMMAND_S = 2.0  # a command (or a pipeline) Redis does not answer in this is a failure
# A batch takes what the logs and the queue got in this long: each call costs the client
# and Redis (which shares the gateway's cores) a fixed part, so fewer calls cost less: a
# loaded gateway relayed 0.82 of resume off's events per CPU-second with calls every 2 ms,
# 0.82-0.84 every 8 ms, 0.86-0.88 every 25 ms (benchmarks/bench_resume.py). Readers on
# another replica see live events up to this much later (a reader on this process reads
# its own copy): 25 ms is below what a person reading can tell.
_COALESCE_S = 0.025
# A batch waits for a quiet moment: one pass of the loop (a sleep(0)) shorter than this, so
# it goes between the bursts of a batching engine's steps, not in their middle; it waits
# no longer than _QUIET_MOST_NS for one.
_QUIET_NS = 1_000_000
_QUIET_MOST_NS = 75_000_000
_RETRY_NS = NS_PER_S  # while Redis is down, a batch is tried at most this often
_HEARTBEAT_MS = 3_000  # a remote reader's mark lives this long; refreshed every second
_READ_COUNT = 1_000  # entries per XREAD
# How far behind a reader Redis may be (the writer's batches, a slow Redis) before the event
# the reader says it read is taken for one the stream never sent; looked at this often.
_AHEAD_NS = 2 * NS_PER_S
_AHEAD_POLL_NS = NS_PER_S // 40
_MAX_BROKEN = 10_000  # streams remembered as unresumable, to say so when Redis is back
_CANCEL_CHANNEL = "ss:cancel"
_CANCEL_REPLY_S = 1.0  # how long a cancel waits for the process that runs the stream


def _events(stream_id: str) -> str:
    return f"ss:{stream_id}:e"


def _meta(stream_id: str) -> str:
    return f"ss:{stream_id}:m"


def _reader(stream_id: str) -> str:
    return f"ss:{stream_id}:r"


def _entry_id(event_id: int) -> str:
    return f"0-{event_id}"


class RedisStore:
    """The shared store (see the module docstring)."""

    def __init__(
        self,
        config: ResumeConfig,
        clock: Clock,
        metrics: GatewayMetrics,
        log: logging.Logger,
        *,
        client: Any = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics
        self.log = log
        self.ttl_ms = max(1, config.ttl // 1_000_000)
        self.max_pending = 16 * config.max_stream_bytes
        if client is None:
            import redis.asyncio as redis

            pool = redis.BlockingConnectionPool.from_url(
                config.store,
                max_connections=256,
                timeout=_COMMAND_S,
                socket_connect_timeout=_CONNECT_S,
                # A pooled connection Redis closed (a restart) fails its next command at
                # once: that command is sent again, once, on a new connection, rather than
                # failing the streams in it while Redis is up. (Safe for the writer's
                # script: an event sent twice is refused by XADD, never stored twice.)
                retry_on_error=[redis.ConnectionError],
            )
            client = redis.Redis(connection_pool=pool)
        self._redis: Any = client
        self._write = client.register_script(_WRITE)
        self._claim = client.register_script(_CLAIM)
        self._refreshed: dict[str, int] = {}  # when a live stream's keys' TTL was last set
        self.up = True
        # The hub's: cancel a stream here; whether it stopped it, None when it runs elsewhere.
        self.on_cancel: Callable[[str], bool | None] | None = None
        self._replies: set[asyncio.Future[None]] = set()  # answers to cancels, being sent
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
        self._listener: asyncio.Task[None] | None = None

    # -- writes: taken from the logs or queued, sent by the writer task ---------------------

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
        self._listener = asyncio.ensure_future(self._listen_for_cancels())

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
                async with asyncio.timeout(_COMMAND_S):
                    await self._send(batch)
            except Exception as exc:
                self._down(exc)
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

    def _down(self, exc: BaseException) -> None:
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

    # -- reads --------------------------------------------------------------------------------

    async def refused(self, info: StreamInfo) -> None:
        """Written at once, not in the next batch: the client is about to get the refusal,
        and its request sent again (on any replica) must not join this stream. Not while
        Redis is known down: the refusal would wait for the command's timeout, for nothing."""
        if not self.up:
            return
        meta = _meta(info.stream_id)
        try:
            async with asyncio.timeout(_COMMAND_S):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.hset(
                        meta,
                        mapping={"route": info.route, "tenant": info.tenant, "ended": REFUSED},
                    )
                    pipe.pexpire(meta, self.ttl_ms)
                    await pipe.execute()
        except Exception as exc:
            self._down(exc)

    async def info(self, stream_id: str) -> StreamInfo | None:
        try:
            async with asyncio.timeout(_COMMAND_S):
                meta = await self._redis.hgetall(_meta(stream_id))
        except Exception as exc:
            self._down(exc)
            return None
        if not meta or b"route" not in meta:
            return None
        ended = meta.get(b"ended")
        return StreamInfo(
            stream_id,
            meta[b"route"].decode(),
            meta.get(b"tenant", b"").decode(),
            None if ended is None else ended.decode(),
        )

    async def follow(self, stream_id: str, after: int, idle_ns: int) -> AsyncIterator[bytes | None]:
        try:
            await self._check(stream_id, after)
            await self._caught_up(stream_id, after)
        except StreamGone:
            raise
        except Exception as exc:
            self._down(exc)
            raise _unreachable() from exc
        yield b""
        try:
            async for chunk in self._read(stream_id, after, idle_ns):
                yield chunk
        except (StreamGone, GeneratorExit):
            raise
        except Exception as exc:
            self._down(exc)
            raise _unreachable() from exc

    async def _read(self, stream_id: str, after: int, idle_ns: int) -> AsyncIterator[bytes | None]:
        redis = self._redis
        key = _events(stream_id)
        last = after
        idle_ms = max(1, idle_ns // 1_000_000)
        beat_due = 0
        while True:
            now = self.clock.now_ns()
            if now >= beat_due:  # the owner's grace waits while someone reads here
                async with asyncio.timeout(_COMMAND_S):
                    await redis.set(_reader(stream_id), b"1", px=_HEARTBEAT_MS)
                beat_due = now + NS_PER_S
            block = min(idle_ms, 1_000)
            async with asyncio.timeout(_COMMAND_S + block / 1000):
                found = await redis.xread({key: _entry_id(last)}, count=_READ_COUNT, block=block)
            if not found:
                await self._check(stream_id, last)
                idle_ms -= block
                if idle_ms <= 0:
                    idle_ms = max(1, idle_ns // 1_000_000)
                    yield None
                continue
            idle_ms = max(1, idle_ns // 1_000_000)
            chunk: list[bytes] = []
            ended = False
            for entry_id, fields in found[0][1]:
                number = int(entry_id.split(b"-")[1])
                if b"x" in fields:
                    ended = True
                    break
                if number != last + 1:
                    raise StreamGone("unresumable", "events of the stream were lost")
                chunk.append(fields[b"d"])
                last = number
            if chunk:
                yield b"".join(chunk)
            if ended:
                return

    async def _caught_up(self, stream_id: str, after: int) -> None:
        """Wait (at most :data:`_AHEAD_NS`) until Redis holds event ``after``; else
        :class:`StreamGone`. A reader may be ahead of Redis by the batches not yet written
        (it read the events live, on the replica that runs the stream); one further ahead
        names an event the stream never sent, and waiting for it would hold the stream's
        generation past its grace with nothing ever sent to the reader."""
        if after <= 0:
            return
        key = _events(stream_id)
        clock = self.clock
        give_up = clock.now_ns() + _AHEAD_NS
        while True:
            async with asyncio.timeout(_COMMAND_S):
                newest = await self._redis.xrevrange(key, count=1)
            if newest and int(newest[0][0].split(b"-")[1]) >= after:
                return
            if clock.now_ns() >= give_up:
                raise StreamGone("unknown", f"the stream has sent no event {after}")
            await clock.sleep_until(clock.now_ns() + _AHEAD_POLL_NS)
            await self._check(stream_id, after)

    async def _check(self, stream_id: str, after: int) -> None:
        """:class:`StreamGone` unless the stream's events after ``after`` are kept."""
        async with asyncio.timeout(_COMMAND_S):
            meta = await self._redis.hgetall(_meta(stream_id))
        if not meta:
            raise StreamGone("expired", "the stream's events are no longer kept")
        reason = meta.get(b"gone")
        if reason is not None:
            reason = reason.decode()
            raise StreamGone(reason, _GONE.get(reason, "the stream's events are not kept"))
        last = meta.get(b"last")  # (the end's number: one past the last event's)
        if last is not None and after >= int(last):
            raise StreamGone("unknown", f"the stream has sent no event {after}")

    async def claim(
        self, key: str, claim: Claim, *, replacing: Claim | None = None
    ) -> Claim | None:
        name = f"ss:k:{key}"
        value = f"{claim.stream_id} {claim.body}"
        old = "" if replacing is None else f"{replacing.stream_id} {replacing.body}"
        async with asyncio.timeout(_COMMAND_S):
            # One script: bound, or replaced, or the binding it has, with nothing between.
            held = await self._claim(keys=[name], args=[value, self.ttl_ms, old])
        if held is None:
            return None
        stream_id, _, body = held.decode().partition(" ")
        return Claim(stream_id, body)

    async def resolve(self, name: str) -> str | None:
        async with asyncio.timeout(_COMMAND_S):
            found = await self._redis.get(f"ss:a:{name}")
        return None if found is None else str(found.decode())

    async def read_elsewhere(self, stream_id: str) -> bool:
        """Whether a reader on another process reads the stream now."""
        try:
            async with asyncio.timeout(_COMMAND_S):
                return bool(await self._redis.exists(_reader(stream_id)))
        except Exception as exc:
            self._down(exc)
            return False

    async def cancel(self, stream_id: str) -> bool:
        """Ask every process for ``stream_id``'s cancel; True when the one that runs it
        answered that it stopped it (within :data:`_CANCEL_REPLY_S`): not when it had
        stopped already, and not when no process runs it (its owner died), whoever listens."""
        reply = f"ss:r:{secrets.token_urlsafe(12)}"
        async with asyncio.timeout(_COMMAND_S):
            receivers = await self._redis.publish(_CANCEL_CHANNEL, f"{stream_id} {reply}")
        if not receivers:
            return False
        async with asyncio.timeout(_COMMAND_S + _CANCEL_REPLY_S):
            answer = await self._redis.blpop([reply], timeout=_CANCEL_REPLY_S)
        return answer is not None and answer[1] == b"1"

    async def _answer_cancel(self, reply: str, stopped: bool) -> None:
        try:
            async with asyncio.timeout(_COMMAND_S):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.rpush(reply, b"1" if stopped else b"0")
                    pipe.pexpire(reply, int(_CANCEL_REPLY_S * 2000))
                    await pipe.execute()
        except Exception as exc:
            self._down(exc)

    async def _listen_for_cancels(self) -> None:
        """Cancel requests that reached another process, for the streams that run here."""
        while True:
            try:
                pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
                try:
                    await pubsub.subscribe(_CANCEL_CHANNEL)
                    async for message in pubsub.listen():
                        data = message.get("data")
                        if isinstance(data, bytes) and self.on_cancel is not None:
                            stream_id, _, reply = data.decode().partition(" ")
                            stopped = self.on_cancel(stream_id)
                            if stopped is not None and reply.startswith("ss:r:"):
                                # (this process runs it: the asker waits for the answer)
                                answer = asyncio.ensure_future(self._answer_cancel(reply, stopped))
                                self._replies.add(answer)
                                answer.add_done_callback(self._replies.discard)
                finally:
                    await pubsub.aclose()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        for answer in list(self._replies):
            answer.cancel()
        for task in (self._writer, self._listener):
            if task is not None and not task.done():
                task.cancel()
        for task in (self._writer, self._listener):
            if task is not None:
                await asyncio.wait({task})
        self._writer = self._listener = None
        self._wake = None
        await self._redis.aclose(close_connection_pool=True)  # (the pool is ours)


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


# Bind an idempotency key unless bound (nil), or replace the binding ARGV[3] (a refused
# request's; "" for none); else the binding it has.
_CLAIM = """
local held = redis.call('GET', KEYS[1])
if (not held) or (ARGV[3] ~= '' and held == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return false
end
return held
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


def _unreachable() -> StreamGone:  # (a new one each time: a raised one holds its traceback)
    return StreamGone("unresumable", "the resume store is unreachable")


_GONE = {
    "too_large": "the stream passed resume.max_stream_bytes; its events are not kept",
    "unresumable": "the resume store could not keep all of its events",
}
