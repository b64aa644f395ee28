"""Streams that survive their reader (docs/gateway.md#resume).

Every event the gateway sends on a streamed route carries an SSE ``id:``; the events are kept
(:mod:`.store`: in memory, or in Redis shared by workers and replicas, :mod:`.redis_store`
and its writes, :mod:`.redis_writes`), so a reader who drops comes back (:mod:`.routes`;
one who then stops reading is cut, :mod:`.stuck`) and gets every event after the last it
saw, none twice. The generation runs on with no
reader for ``resume.grace`` (:mod:`.hub`).
"""

from __future__ import annotations

import logging

from steadystream._clock import Clock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.hub import STREAM_ID_HEADER, LiveStream, StreamHub, StreamTee

__all__ = ["STREAM_ID_HEADER", "LiveStream", "StreamHub", "StreamTee", "open_hub"]


def open_hub(
    config: ResumeConfig, clock: Clock, metrics: GatewayMetrics, log: logging.Logger
) -> StreamHub | None:
    """The hub ``config`` asks for (None: resume off); a ``redis://`` store needs the
    ``resume`` extra (redis-py), imported only then."""
    if not config.enabled:
        return None
    if config.store == "memory":
        return StreamHub(config, clock, metrics, log=log)
    from steadystream.gateway.resume.redis_store import RedisStore

    shared = RedisStore(config, clock, metrics, log)
    hub = StreamHub(config, clock, metrics, shared=shared, log=log)
    shared.on_cancel = hub.cancel_here
    return hub
