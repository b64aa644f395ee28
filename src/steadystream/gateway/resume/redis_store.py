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

**Nothing on the relay's path**: what this process runs is written by
:class:`~steadystream.gateway.resume.redis_writes.RedisWriter`, in batches, from the logs the
tee already writes to (that module says how, and its bounds). When Redis does not answer,
the streams of the lost writes go on *unresumable* (their readers get 410, never a gap):
said in the log, ``steadystream_resume_store_up`` and ``/healthz``. Nothing else fails. A
command whose connection Redis closed under it (a restart) is sent once more, on a new
connection.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

from steadystream._clock import NS_PER_S, Clock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.log import StreamGone, StreamLog
from steadystream.gateway.resume.redis_writes import RedisWriter
from steadystream.gateway.resume.store import REFUSED, Claim, StreamInfo
from steadystream.protocol.apis import API_PATHS

__all__ = ["RedisStore"]

_CONNECT_S = 1.0
_COMMAND_S = 2.0  # a command (or a pipeline) Redis does not answer in this is a failure
_HEARTBEAT_MS = 3_000  # a remote reader's mark lives this long; refreshed every second
_READ_COUNT = 1_000  # entries per XREAD
# How far behind a reader Redis may be (the writer's batches, a slow Redis) before the event
# the reader says it read is taken for one the stream never sent; looked at this often.
_AHEAD_NS = 2 * NS_PER_S
_AHEAD_POLL_NS = NS_PER_S // 40
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
        self._claim = client.register_script(_CLAIM)
        self.writes = RedisWriter(client, config, clock, metrics, log, command_s=_COMMAND_S)
        # The hub's: cancel a stream here; whether it stopped it, None when it runs elsewhere.
        self.on_cancel: Callable[[str], bool | None] | None = None
        self._replies: set[asyncio.Future[None]] = set()  # answers to cancels, being sent
        self._listener: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        """Whether Redis took the last batch (or the last refusal)."""
        return self.writes.up

    # -- writes: this process's streams (redis_writes) ---------------------------------------

    def opened(self, info: StreamInfo, source: StreamLog | None = None) -> None:
        """A stream starts here. With ``source`` (its log in this process) its events are read
        from there; without, they are handed here (:meth:`append`)."""
        if self._listener is None:  # (a stream runs here: cancels may come for it)
            self._listener = asyncio.ensure_future(self._listen_for_cancels())
        self.writes.opened(info, source)

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        self.writes.append(stream_id, first_id, events, size)

    def ended(self, stream_id: str, how: str, next_id: int) -> None:
        self.writes.ended(stream_id, how, next_id)

    def alias(self, name: str, stream_id: str) -> None:
        self.writes.alias(name, stream_id)

    # -- reads --------------------------------------------------------------------------------

    async def refused(self, info: StreamInfo) -> None:
        """Written at once, not in the next batch: the client is about to get the refusal,
        and its request sent again (on any replica) must not join this stream. Not while
        Redis is known down: the refusal would wait for the command's timeout, for nothing."""
        if not self.writes.up:
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
            self.writes.down(exc)

    async def info(self, stream_id: str) -> StreamInfo | None:
        try:
            async with asyncio.timeout(_COMMAND_S):
                meta = await self._redis.hgetall(_meta(stream_id))
        except Exception as exc:
            self.writes.down(exc)
            return None
        if not meta or b"route" not in meta:
            return None
        ended = meta.get(b"ended")
        try:
            route = meta[b"route"].decode()
            tenant = meta.get(b"tenant", b"").decode()
            end = None if ended is None else ended.decode()
        except UnicodeDecodeError:
            return None
        # A route this gateway does not serve (another version's, a hand-made key) is no
        # stream of its: its name would become a metric label and pick a reply's shape.
        if route not in API_PATHS:
            return None
        return StreamInfo(stream_id, route, tenant, end)

    async def follow(self, stream_id: str, after: int, idle_ns: int) -> AsyncIterator[bytes | None]:
        try:
            await self._check(stream_id, after)
            await self._caught_up(stream_id, after)
        except StreamGone:
            raise
        except Exception as exc:
            self.writes.down(exc)
            raise _unreachable() from exc
        yield b""
        try:
            async for chunk in self._read(stream_id, after, idle_ns):
                yield chunk
        except (StreamGone, GeneratorExit):
            raise
        except Exception as exc:
            self.writes.down(exc)
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
            self.writes.down(exc)
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
            self.writes.down(exc)

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
        listener, self._listener = self._listener, None
        if listener is not None:
            if not listener.done():
                listener.cancel()
            await asyncio.wait({listener})
        await self.writes.close()
        await self._redis.aclose(close_connection_pool=True)  # (the pool is ours)


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


def _unreachable() -> StreamGone:  # (a new one each time: a raised one holds its traceback)
    return StreamGone("unresumable", "the resume store is unreachable")


_GONE = {
    "too_large": "the stream passed resume.max_stream_bytes; its events are not kept",
    "unresumable": "the resume store could not keep all of its events",
}
