"""A stream's meta in Redis that this gateway did not write (another version's, a hand-made
key): a route it does not serve, or bytes that are no UTF-8, is no stream of its, not a
traceback and not a metric label (gateway/resume/redis_store.py, ``info``)."""

from __future__ import annotations

import logging

import pytest
import redis
from prometheus_client import CollectorRegistry

from steadystream._clock import MonotonicClock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.redis_store import RedisStore
from tests.support.resume import RedisServer

pytestmark = pytest.mark.integration


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("meta", "found"),
    [
        ({"route": "chat", "tenant": "t"}, True),
        ({"route": "embeddings", "tenant": "t"}, False),
        ({"route": 'chat",evil="x', "tenant": "t"}, False),
        ({"route": b"\xff\xfe", "tenant": "t"}, False),
        ({"route": "chat", "tenant": b"\xc3"}, False),
        ({"route": "chat", "tenant": "t", "ended": b"\x80"}, False),
    ],
)
async def test_meta_this_gateway_did_not_write_is_no_stream(
    redis_server: RedisServer, meta: dict[str, str | bytes], found: bool
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.hset("ss:strm_handmade0000:m", mapping=meta)  # type: ignore[arg-type]
    finally:
        client.close()
    store = RedisStore(
        ResumeConfig.model_validate({"store": redis_server.url}),
        MonotonicClock(),
        GatewayMetrics(CollectorRegistry()),
        logging.getLogger("test"),
    )
    try:
        info = await store.info("strm_handmade0000")
    finally:
        await store.close()
    assert (info is not None) is found
    if info is not None:
        assert (info.route, info.tenant) == ("chat", "t")
