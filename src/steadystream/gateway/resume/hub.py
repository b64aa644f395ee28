"""The gateway's streams that outlive their reader: ids, the tee into the stores, the grace.

Each streamed request opens a :class:`LiveStream` (:meth:`StreamHub.open`). On the relay's
path its :class:`StreamTee` stamps each event with its ``id:`` (gateway/resume/_tee_py.py) and
keeps the stamped events in the stream's log in this process; the shared store, when
configured (Redis, batched), reads them from that log off the relay's path, or is handed
them by the tee for a stream this process does not keep. The relay tells the stream when
its client leaves (:meth:`LiveStream.reader_left`); with no reader left the generation runs
on for ``resume.grace``, then the stream's ``cancel`` (the relay's) is called, as a
disconnect cancels without resume. Readers who come back (:mod:`steadystream.gateway.resume.routes`)
count as readers while they read. Tokens generated while no one read are counted in
``steadystream_tokens_without_reader_total``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
from collections.abc import Callable

import orjson

from steadystream._clock import Clock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.ids import StreamTee, tee_build
from steadystream.gateway.resume.store import (
    REFUSED,
    Claim,
    EventStore,
    MemoryStore,
    StreamInfo,
)

__all__ = [
    "CANCELLED_ENDS",
    "REFUSED",
    "RESPONSE_ID",
    "STREAM_ID_HEADER",
    "LiveStream",
    "StreamHub",
    "StreamTee",
    "idempotency_key",
]

STREAM_ID_HEADER = "X-Steadystream-Stream-Id"
# The ends the gateway makes by cutting a stream (gateway/relay.py): its events then have no
# end of their own, and a reader who reads them again is told why (resume/routes.py).
CANCELLED_ENDS = {
    "cancelled": "by DELETE or the Responses cancel, or no reader came back within resume.grace",
    "client-stuck": "its reader stopped reading (limits.stuck_timeout)",
}
_ELSEWHERE_RECHECK_NS = 1_000_000_000  # a reader on another process marks itself each second
_WATCHED_EVENTS = 8  # a response.created comes first, or after a few keepalives at most
# What a response id may be to name its stream (a key in the store, a part of a path).
RESPONSE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def _no_tokens() -> int:
    return 0


def idempotency_key(tenant: str, path: str, key: str) -> str:
    """The name an ``Idempotency-Key`` is kept under: scoped by tenant and path, and hashed
    (a client's key may be anything, secrets included)."""
    digest = hashlib.sha256(f"{tenant}\0{path}\0{key}".encode()).hexdigest()
    return digest[:40]


def _response_name(tenant: str, response_id: str) -> str:
    """The name a Responses API response's id is kept under: scoped by tenant, since a
    client may pick it (a translated response's id is made from the ``X-Request-Id``) and
    must not take another tenant's."""
    digest = hashlib.sha256(f"{tenant}\0{response_id}".encode()).hexdigest()
    return f"r{digest[:40]}"


class LiveStream:
    """One stream this process runs: its tee, its readers, its grace (module docstring)."""

    def __init__(self, hub: StreamHub, info: StreamInfo, tee: StreamTee) -> None:
        self.hub = hub
        self.info = info
        self.tee = tee
        self.readers = 1  # the client that asked
        self.cancel: Callable[[], None] | None = None  # the relay's: stop the generation now
        self.tokens: Callable[[], int] = _no_tokens  # the relay's: tokens generated so far
        self.running = True
        self.grace_expired = False
        self._grace: asyncio.Task[None] | None = None
        self._unread_since = 0  # tokens when the last reader left

    @property
    def stream_id(self) -> str:
        return self.info.stream_id

    def reader_came(self) -> None:
        self.readers += 1
        if self.readers == 1:
            self._stop_grace()
            self._count_unread()

    def reader_left(self) -> bool:
        """A reader went; True when the generation goes on without it (grace), False when
        it should be cancelled now (no grace, or already over)."""
        self.readers -= 1
        if self.readers > 0 or not self.running:
            return self.running
        grace = self.hub.config.grace
        if grace <= 0:
            return False
        self._unread_since = self.tokens()
        self._grace = asyncio.ensure_future(self._wait_grace(self.hub.clock.now_ns() + grace))
        return True

    def stop(self) -> bool:
        """Cancel the generation now (``DELETE``); False when it is over already."""
        cancel, self.cancel = self.cancel, None  # (once: a second DELETE is told it is over)
        if not self.running or cancel is None:
            return False
        self._stop_grace()
        cancel()
        return True

    def ended(self, how: str) -> None:
        """The relay is done with the stream (whatever the way)."""
        if not self.running:
            return
        self.running = False
        self._stop_grace()
        if self.readers <= 0:
            self._count_unread()
        self.cancel = None
        self.tokens = _no_tokens
        self.hub.ended(self, how)

    async def _wait_grace(self, deadline_ns: int) -> None:
        hub = self.hub
        clock = hub.clock
        await clock.sleep_until(deadline_ns)
        while self.readers <= 0 and self.running and await hub.read_elsewhere(self.stream_id):
            await clock.sleep_until(clock.now_ns() + _ELSEWHERE_RECHECK_NS)
        if self.readers > 0 or not self.running:
            return
        self._grace = None
        self.grace_expired = True
        hub.metrics.resume_grace_expiries.labels(self.info.route).inc()
        hub.log.info(
            "stream %s: no reader came back within resume.grace; cancelled", self.stream_id
        )
        if self.cancel is not None:
            self.cancel()

    def _stop_grace(self) -> None:
        task, self._grace = self._grace, None
        if task is not None and not task.done():
            task.cancel()

    def response_created(self, events: list[bytes]) -> None:
        """Find the Responses API's id of the response in its first events (its
        ``response.created``): ``GET /v1/responses/{id}`` names the stream by it."""
        tee = self.tee
        for event in events:
            for line in event.splitlines():
                if not line.startswith(b"data:") or b"response.created" not in line:
                    continue
                try:
                    data = orjson.loads(line[5:])
                    response_id = data["response"]["id"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    continue
                # (a name of a few safe characters: a key in the store, a path's part)
                if isinstance(response_id, str) and RESPONSE_ID.fullmatch(response_id):
                    self.hub.alias(self.info.tenant, response_id, self.stream_id)
                    tee.watch = None
                    return
        if tee.next_id > _WATCHED_EVENTS:
            tee.watch = None

    def _count_unread(self) -> None:
        unread = self.tokens() - self._unread_since
        if unread > 0:
            self.hub.metrics.tokens_without_reader.labels(self.info.route).inc(unread)
        self._unread_since = 0


class StreamHub:
    """This process's live streams and the stores their events go to."""

    def __init__(
        self,
        config: ResumeConfig,
        clock: Clock,
        metrics: GatewayMetrics,
        *,
        shared: EventStore | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics
        self.log = log if log is not None else logging.getLogger("steadystream.gateway")
        self.local = MemoryStore(
            clock,
            max_streams=config.max_streams,
            max_stream_bytes=config.max_stream_bytes,
            ttl_ns=config.ttl,
        )
        self.shared = shared
        self.live: dict[str, LiveStream] = {}
        metrics.resume_store_up.set(1)

    @staticmethod
    def new_id() -> str:
        """A fresh stream id no client can guess: it is what a resume asks for."""
        return f"strm_{secrets.token_urlsafe(18)}"

    def open(
        self,
        route: str,
        tenant: str,
        scrub: Callable[[bytes], bytes] | None = None,
        stream_id: str | None = None,
    ) -> LiveStream:
        """A new stream (``stream_id``: one :meth:`new_id` gave, else a new one)."""
        stream_id = stream_id or self.new_id()
        info = StreamInfo(stream_id, route, tenant)
        log = self.local.opened(info)
        shared = self.shared
        if shared is not None:
            if log.gone is None:  # the shared store reads the events from this log
                shared.opened(info, log)
                shared = None
            else:  # not kept here: the tee hands them to the shared store
                shared.opened(info)
        tee = tee_build().StreamTee(stream_id, log, shared, scrub)
        live = LiveStream(self, info, tee)
        if route == "responses":
            live.tee.watch = live.response_created
        self.live[stream_id] = live
        return live

    def alias(self, tenant: str, response_id: str, stream_id: str) -> None:
        name = _response_name(tenant, response_id)
        self.local.alias(name, stream_id)
        if self.shared is not None:
            self.shared.alias(name, stream_id)

    async def stream_of_response(self, tenant: str, response_id: str) -> str | None:
        """The stream of one of ``tenant``'s Responses API responses, by its id."""
        name = _response_name(tenant, response_id)
        found = await self.local.resolve(name)
        if found is None and self.shared is not None:
            found = await self.shared.resolve(name)
        return found

    async def read_elsewhere(self, stream_id: str) -> bool:
        """Whether a reader on another process (through the shared store) reads it."""
        return self.shared is not None and await self.shared.read_elsewhere(stream_id)

    def cancel_here(self, stream_id: str) -> bool | None:
        """Another process was asked to cancel ``stream_id``: cancel it if it runs here;
        whether it was stopped now (False: it had stopped), None when it runs elsewhere."""
        live = self.live.get(stream_id)
        return None if live is None else live.stop()

    async def cancel_elsewhere(self, stream_id: str) -> bool:
        """Ask the process that runs ``stream_id`` (another worker or replica) to cancel it."""
        return self.shared is not None and await self.shared.cancel(stream_id)

    async def refused(self, live: LiveStream) -> None:
        """``live``'s request is refused: ended here, and said to the shared store at once
        (before the refusal goes out), so that the request sent again is a new request on
        this process or any other, never a join of one that sends nothing."""
        live.ended(REFUSED)
        if self.shared is not None:
            await self.shared.refused(live.info)

    def ended(self, live: LiveStream, how: str) -> None:
        self.live.pop(live.stream_id, None)
        if self.shared is not None:  # (first: it takes what it has not from the local log)
            self.shared.ended(live.stream_id, how, live.tee.next_id)
        if how == REFUSED:  # the request again is a new request (its key is free here)
            self.local.forget(live.stream_id)
        else:
            self.local.ended(live.stream_id, how, live.tee.next_id)

    async def info(self, stream_id: str) -> StreamInfo | None:
        """The stream here, else in the shared store."""
        info = await self.local.info(stream_id)
        if info is None and self.shared is not None:
            info = await self.shared.info(stream_id)
        if info is None:  # (let go here, or never kept: a resume is told so)
            info = self.local.evicted(stream_id)
        return info

    def store_of(self, stream_id: str) -> EventStore:
        """The store to read ``stream_id`` from: this process's when it has it."""
        if self.local.log(stream_id) is not None or self.shared is None:
            return self.local
        return self.shared

    async def claim(
        self, key: str, claim: Claim, *, replacing: Claim | None = None
    ) -> Claim | None:
        """Bind an idempotency key (in the shared store too, so another worker's repeat of
        the request joins this one): None when bound now, or the claim it had; a binding to
        ``replacing`` (a refused request's) is replaced."""
        store: EventStore = self.local if self.shared is None else self.shared
        return await store.claim(key, claim, replacing=replacing)

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says of resume: the store, and whether it takes writes."""
        if self.shared is None:
            return {"store": "memory", "up": True}
        return {"store": "redis", "up": self.shared_up()}

    def shared_up(self) -> bool:
        return bool(getattr(self.shared, "up", True))

    async def close(self) -> None:
        for live in list(self.live.values()):
            live._stop_grace()
        if self.shared is not None:
            await self.shared.close()
