"""Where streams' events are kept for readers who come back: the protocol, and memory's.

Two stores keep the same things (docs/gateway.md#resume):

- :class:`MemoryStore`: this process's streams, always there. Bounded: ``resume.max_streams``
  streams (past it, the longest ended go first; with every kept stream still running, a new
  stream is not kept), ``resume.max_stream_bytes`` each, ``resume.ttl`` after the end.
- :class:`~steadystream.gateway.resume.redis.RedisStore` (``resume.store: redis://...``): the
  same streams shared by every worker and replica, written in batches off the relay's path.

What both offer is :class:`EventStore`; the relay's side of a stream (ids, tee) is in
:mod:`steadystream.gateway.resume.hub`. Idempotency keys are kept beside the streams, as the
digest of (tenant, path, key) and the digest of the request body they were first sent with.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import NamedTuple, Protocol

from steadystream._clock import Clock
from steadystream.gateway.resume.ids import tee_build
from steadystream.gateway.resume.log import StreamGone, StreamLog, follow

__all__ = ["REFUSED", "Claim", "EventStore", "MemoryStore", "StreamInfo"]


REFUSED = "refused"  # how a stream ends that never started (its request got an error)


class StreamInfo(NamedTuple):
    """What a resume needs to know of a stream before reading it."""

    stream_id: str
    route: str
    tenant: str
    ended: str | None = None  # how it ended; None while it runs


class Claim(NamedTuple):
    """An idempotency key's stream, and the digest of the body it was first sent with."""

    stream_id: str
    body: str


class EventStore(Protocol):
    """A store of streams' events (see the module docstring)."""

    def opened(self, info: StreamInfo, source: StreamLog | None = None) -> object:
        """A stream starts; its events follow (:meth:`append`), or, with ``source`` (the
        stream's log in this process, which its tee writes to), are read from there."""

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        """Events ``first_id``, ``first_id + 1``, ... (``size`` bytes in all); never waits
        (a store batches)."""

    def ended(self, stream_id: str, how: str, next_id: int) -> None:
        """The stream is over (its last event ``next_id - 1``); its events are kept
        ``resume.ttl`` more."""

    async def refused(self, info: StreamInfo) -> None:
        """The stream's request was refused: said now, before the refusal goes out, so that
        the request sent again at once is a new request, not a join of this one."""

    async def info(self, stream_id: str) -> StreamInfo | None:
        """The stream, or None when the store has no such stream (any more)."""

    def follow(self, stream_id: str, after: int, idle_ns: int) -> AsyncIterator[bytes | None]:
        """Events after ``after``, then live ones, until the end (None: ``idle_ns`` with
        nothing); :class:`StreamGone` when they are not all kept."""

    async def claim(
        self, key: str, claim: Claim, *, replacing: Claim | None = None
    ) -> Claim | None:
        """Bind an idempotency key to ``claim`` unless it is bound: None (bound now), or the
        claim it had. With ``replacing``, a binding to that claim (a request that was refused)
        is replaced, at once: of two repeats, one binds and the other joins it."""

    def alias(self, name: str, stream_id: str) -> None:
        """Another name of the stream (a Responses API response's id)."""

    async def resolve(self, name: str) -> str | None:
        """The stream an :meth:`alias` names, or None."""

    async def cancel(self, stream_id: str) -> bool:
        """Ask the process that runs the stream to cancel it; whether one was asked."""

    async def read_elsewhere(self, stream_id: str) -> bool:
        """Whether a reader on another process reads the stream now."""

    async def close(self) -> None:
        """Let go of what the store holds open (connections, its writer)."""


class MemoryStore:
    """This process's streams (see the module docstring)."""

    def __init__(
        self, clock: Clock, *, max_streams: int, max_stream_bytes: int, ttl_ns: int
    ) -> None:
        self.clock = clock
        self.max_streams = max_streams
        self.max_stream_bytes = max_stream_bytes
        self.ttl_ns = ttl_ns
        self._streams: OrderedDict[str, tuple[StreamInfo, StreamLog]] = OrderedDict()
        self._ended: OrderedDict[str, int] = OrderedDict()  # in the order they ended
        self._claims: dict[str, tuple[Claim, str]] = {}  # key -> (claim, its stream)
        self._claims_of: dict[str, list[str]] = {}
        self._aliases: dict[str, str] = {}
        self._aliases_of: dict[str, str] = {}
        # Streams let go (to make room, or past their TTL) or never kept (every kept one
        # running), the latest max_streams, with why: a resume is told it (410
        # stream_evicted, stream_expired), never "unknown".
        self._gone: OrderedDict[str, tuple[StreamInfo, str]] = OrderedDict()
        # Streams not kept that still run: remembered (keys and all) until they end, however
        # many streams go meanwhile, so that a DELETE still finds them and a repeat of their
        # request still joins them (as many as run at once: the server's bound).
        self._unkept: dict[str, StreamInfo] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def opened(self, info: StreamInfo, source: StreamLog | None = None) -> StreamLog:
        """(Also gives the stream's log, for its tee to write to directly: memory's logs are
        the sources, so ``source`` is not used.)"""
        self.sweep()
        log: StreamLog = tee_build().StreamLog(self.max_stream_bytes)  # (the tee's build)
        while len(self._streams) >= self.max_streams and self._ended:
            self._forget(next(iter(self._ended)), why="evicted")
        if len(self._streams) >= self.max_streams:
            # Every kept stream still runs: this one is not kept (its tee writes to a log
            # that keeps nothing), and is remembered as evicted, and why.
            log.drop(_not_kept())
            self._unkept[info.stream_id] = info
        else:
            self._streams[info.stream_id] = (info, log)
        return log

    def log(self, stream_id: str) -> StreamLog | None:
        found = self._streams.get(stream_id)
        return None if found is None else found[1]

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        found = self._streams.get(stream_id)  # (a tee writes to the log opened gave it)
        if found is not None:
            found[1].add(events, size)

    def ended(self, stream_id: str, how: str, next_id: int) -> None:
        found = self._streams.get(stream_id)
        if found is None:
            unkept = self._unkept.pop(stream_id, None)
            if unkept is not None:
                self._remember_gone(unkept._replace(ended=how), "not_kept")
            gone = self._gone.get(stream_id)
            if gone is not None:
                self._gone[stream_id] = (gone[0]._replace(ended=how), gone[1])
            return
        info, log = found
        now = self.clock.now_ns()
        log.end(how, now)
        self._streams[stream_id] = (info._replace(ended=how), log)
        self._ended[stream_id] = now

    async def refused(self, info: StreamInfo) -> None:
        self._forget(info.stream_id)

    async def info(self, stream_id: str) -> StreamInfo | None:
        self.sweep()
        found = self._streams.get(stream_id)
        return None if found is None else found[0]

    def evicted(self, stream_id: str) -> StreamInfo | None:
        """A stream let go (to make room, past its TTL) or never kept, or None."""
        unkept = self._unkept.get(stream_id)
        if unkept is not None:
            return unkept
        gone = self._gone.get(stream_id)
        return None if gone is None else gone[0]

    def follow(self, stream_id: str, after: int, idle_ns: int) -> AsyncIterator[bytes | None]:
        found = self._streams.get(stream_id)
        if found is None:
            if stream_id in self._unkept:
                raise _not_kept()
            gone = self._gone.get(stream_id)
            if gone is not None:
                raise _GONE_BY[gone[1]]()
            raise StreamGone("unknown", "no such stream is kept")
        return follow(found[1], after, self.clock, idle_ns)

    async def claim(
        self, key: str, claim: Claim, *, replacing: Claim | None = None
    ) -> Claim | None:
        self.sweep()
        held = self._claims.get(key)
        if held is not None:
            if replacing is None or held[0] != replacing:
                return held[0]
            keys = self._claims_of.get(held[1], [])
            if key in keys:
                keys.remove(key)
        self._claims[key] = (claim, claim.stream_id)
        self._claims_of.setdefault(claim.stream_id, []).append(key)
        return None

    def alias(self, name: str, stream_id: str) -> None:
        if stream_id in self._streams and stream_id not in self._aliases_of:
            older = self._aliases.get(name)
            if older is not None:  # (the name moves to the newer stream)
                self._aliases_of.pop(older, None)
            self._aliases[name] = stream_id
            self._aliases_of[stream_id] = name

    async def resolve(self, name: str) -> str | None:
        self.sweep()
        return self._aliases.get(name)

    async def cancel(self, stream_id: str) -> bool:
        return False  # (a stream of this process is cancelled through its hub)

    async def read_elsewhere(self, stream_id: str) -> bool:
        return False

    async def close(self) -> None:
        return None

    def sweep(self) -> None:
        """Forget the streams that ended more than ``ttl`` ago."""
        expired = self.clock.now_ns() - self.ttl_ns
        while self._ended:
            stream_id, ended_ns = next(iter(self._ended.items()))
            if ended_ns > expired:
                break
            self._forget(stream_id, why="expired")

    def forget(self, stream_id: str) -> None:
        """Let go of a stream and its idempotency keys now: its request was refused (a
        reader who joined it meanwhile is told so)."""
        self._forget(stream_id)

    def _forget(self, stream_id: str, *, why: str | None = None) -> None:
        """Let go of a stream: ``why`` "evicted" or "expired" is remembered for a resume (an
        evicted stream's keys too, so a repeat of its request is told; an expired one's
        request may start again, and its response id still says it expired); None forgets
        it outright."""
        self._ended.pop(stream_id, None)
        self._unkept.pop(stream_id, None)
        found = self._streams.pop(stream_id, None)
        if found is not None:
            found[1].drop(_GONE_BY[why]())
            if why is not None:
                self._remember_gone(found[0], why)
        if why is None:
            self._forget_keys(stream_id)
        elif why == "expired":  # (its request may start again; its response id still tells)
            self._forget_keys(stream_id, aliases=False)

    def _remember_gone(self, info: StreamInfo, why: str) -> None:
        """Keep why ``info``'s stream went (its keys with it: a repeat of its request is told
        too), for the latest ``max_streams`` streams gone."""
        gone = self._gone
        gone[info.stream_id] = (info, why)
        while len(gone) > self.max_streams:
            self._forget_keys(gone.popitem(last=False)[0])

    def _forget_keys(self, stream_id: str, *, aliases: bool = True) -> None:
        for key in self._claims_of.pop(stream_id, ()):
            self._claims.pop(key, None)
        if not aliases:
            return
        name = self._aliases_of.pop(stream_id, None)
        if name is not None:
            self._aliases.pop(name, None)


def _expired() -> StreamGone:
    return StreamGone("expired", "the stream's events are no longer kept (resume.ttl)")


def _evicted() -> StreamGone:  # (a new one each time: a raised one holds its traceback)
    return StreamGone(
        "evicted",
        "resume.max_streams streams were kept; the stream was let go to make room for newer ones",
    )


def _not_kept() -> StreamGone:
    return StreamGone(
        "evicted",
        "the stream was not kept: resume.max_streams streams were kept and all were still"
        " running when it began",
    )


def _refused() -> StreamGone:
    return StreamGone(
        "unresumable",
        "the request got an error before its stream began: nothing was streamed (sending it"
        " again is a new request)",
    )


# Why a stream's log is dropped, by why it was let go (None: its request was refused;
# "not_kept": never kept, the store full of running streams).
_GONE_BY = {"evicted": _evicted, "expired": _expired, "not_kept": _not_kept, None: _refused}
