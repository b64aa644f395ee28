"""What the Redis store writes (gateway/resume/redis_writes.py), and when: a stream's events
read from its log in this process, or handed read by read when this process does not keep
it; in order, ends after events.

Each test starts its own ``redis-server`` (conftest.py) and drives the store on a real loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from steadystream._clock import MonotonicClock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.log import StreamGone, StreamLog
from steadystream.gateway.resume.redis_store import RedisStore
from steadystream.gateway.resume.store import StreamInfo
from tests.support.resume import RedisServer

pytestmark = pytest.mark.integration


def _store(server: RedisServer, **config: object) -> RedisStore:
    return RedisStore(
        ResumeConfig.model_validate({"store": server.url, **config}),
        MonotonicClock(),
        GatewayMetrics(CollectorRegistry()),
        logging.getLogger("test"),
    )


def _entries(server: RedisServer, stream_id: str) -> list[tuple[int, dict[bytes, bytes]]]:
    client = redis.Redis.from_url(server.url)
    try:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(f"ss:{stream_id}:e")  # type: ignore[assignment]
        return [(int(entry_id.split(b"-")[1]), fields) for entry_id, fields in entries]
    finally:
        client.close()


def _meta(server: RedisServer, stream_id: str) -> dict[bytes, bytes]:
    client = redis.Redis.from_url(server.url)
    try:
        meta: dict[bytes, bytes] = client.hgetall(f"ss:{stream_id}:m")  # type: ignore[assignment]
        return meta
    finally:
        client.close()


def _alias(server: RedisServer, name: str) -> bytes | None:
    client = redis.Redis.from_url(server.url)
    try:
        found: bytes | None = client.get(f"ss:a:{name}")  # type: ignore[assignment]
        return found
    finally:
        client.close()


async def _until(check: object, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("Redis never got the writes")
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_a_kept_stream_is_read_from_its_log_and_its_end_follows_its_events(
    redis_server: RedisServer,
) -> None:
    store = _store(redis_server)
    log = StreamLog(1 << 20)
    try:
        store.opened(StreamInfo("s1", "chat", "t"), log)
        log.add([b"data: a\nid: 1\n\n", b"data: b\nid: 2\n\n"], 30)
        await _until(lambda: len(_entries(redis_server, "s1")) == 2)
        log.add([b"data: c\nid: 3\n\n"], 15)  # (the end comes before the next batch)
        store.ended("s1", "complete", 4)
        # The memory store may let go of an ended stream's events at once (to make room):
        # what Redis had not got was taken at the end.
        log.drop(StreamGone("evicted", "made room"))
        await _until(lambda: len(_entries(redis_server, "s1")) == 4)
    finally:
        await store.close()
    entries = _entries(redis_server, "s1")
    assert [number for number, _ in entries] == [1, 2, 3, 4]
    assert [fields.get(b"d") for _, fields in entries[:3]] == [
        b"data: a\nid: 1\n\n",
        b"data: b\nid: 2\n\n",
        b"data: c\nid: 3\n\n",
    ]
    assert entries[3][1] == {b"x": b"complete"}
    assert _meta(redis_server, "s1")[b"ended"] == b"complete"


@pytest.mark.asyncio
async def test_a_log_past_its_bound_makes_the_stream_unresumable_in_redis_too(
    redis_server: RedisServer,
) -> None:
    store = _store(redis_server)
    log = StreamLog(40)
    try:
        store.opened(StreamInfo("s2", "chat", "t"), log)
        log.add([b"data: a\nid: 1\n\n"], 15)
        await _until(lambda: len(_entries(redis_server, "s2")) == 1)
        log.add([b"data: " + b"x" * 40 + b"\nid: 2\n\n"], 55)  # past the bound: dropped
        await _until(lambda: _meta(redis_server, "s2").get(b"gone") is not None)
        store.ended("s2", "complete", 3)
        store.alias("after-s2", "s2")  # (batches go in order: once it is there, so is any end)
        await _until(lambda: _alias(redis_server, "after-s2") is not None)
    finally:
        await store.close()
    meta = _meta(redis_server, "s2")
    assert meta[b"gone"] == b"too_large"
    assert b"ended" not in meta  # no end written over the reason it cannot be resumed
    assert _entries(redis_server, "s2") == []  # no partial left to replay


@pytest.mark.asyncio
async def test_a_stream_this_process_does_not_keep_is_handed_read_by_read(
    redis_server: RedisServer,
) -> None:
    store = _store(redis_server)
    try:
        store.opened(StreamInfo("s3", "chat", "t"))
        store.append("s3", 1, [b"data: a\nid: 1\n\n"], 15)
        store.append("s3", 2, [b"data: b\nid: 2\n\n"], 15)
        store.ended("s3", "complete", 3)
        await _until(lambda: len(_entries(redis_server, "s3")) == 3)
    finally:
        await store.close()
    assert [fields.get(b"d") for _, fields in _entries(redis_server, "s3")[:2]] == [
        b"data: a\nid: 1\n\n",
        b"data: b\nid: 2\n\n",
    ]


@pytest.mark.asyncio
async def test_many_running_streams_are_written_in_bounded_batches_and_none_is_lost(
    redis_server: RedisServer,
) -> None:
    # A batch holds at most max_stream_bytes x 16 of the logs' events: the rest waits for
    # the next one (it is in the logs), it is not dropped.
    store = _store(redis_server, max_stream_bytes="1KiB")
    logs = [StreamLog(1 << 10) for _ in range(40)]
    event = b"data: " + b"y" * 500 + b"\nid: %d\n\n"
    try:
        for index, log in enumerate(logs):
            store.opened(StreamInfo(f"m{index}", "chat", "t"), log)
            log.add([event % 1], len(event % 1))
        await _until(lambda: all(_entries(redis_server, f"m{i}") for i in range(40)))
    finally:
        await store.close()
    for index in range(40):
        assert _meta(redis_server, f"m{index}").get(b"gone") is None
        assert [number for number, _ in _entries(redis_server, f"m{index}")] == [1]


class _PassClock:
    """Time that moves only while the loop is busy: ``busy(n)`` makes each of the loop's next
    ``n`` passes take 5 ms (a burst of reads), and passes after them take none."""

    def __init__(self) -> None:
        self.now = 0

    def now_ns(self) -> int:
        return self.now

    def busy(self, passes: int) -> None:
        if passes > 0:
            self.now += 5_000_000
            asyncio.get_running_loop().call_soon(self.busy, passes - 1)


@pytest.mark.asyncio
@pytest.mark.parametrize(("busy_passes", "waited_ms"), [(0, 0), (4, 20), (100, 75)])
async def test_a_batch_waits_for_a_quiet_pass_of_the_loop_but_not_long(
    busy_passes: int, waited_ms: int
) -> None:
    # Sent in the middle of a burst of reads, a batch would delay the burst's events behind
    # it: it goes after the burst, or after 75 ms of bursts at most.
    clock = _PassClock()
    store = RedisStore(
        ResumeConfig.model_validate({"store": "redis://127.0.0.1:1/0"}),
        clock,  # type: ignore[arg-type]
        GatewayMetrics(CollectorRegistry()),
        logging.getLogger("test"),
    )
    asyncio.get_running_loop().call_soon(clock.busy, busy_passes)
    await store.writes._quiet_moment()
    assert clock.now == waited_ms * 1_000_000
    await store.close()


@pytest.mark.asyncio
async def test_events_of_any_bytes_and_sizes_reach_redis_exactly(
    redis_server: RedisServer,
) -> None:
    # A stream's events go to the script as one operation: their sizes, then their bytes.
    # Bytes that look like the operations' own syntax, every byte value, an empty event and
    # a large one must come out of Redis as they went in, each under its own id.
    every_byte = bytes(range(256))
    events = [
        b"data: [1, 2, 3]\nid: 1\n\n",
        b"a s4 9 99\n" + every_byte + b"\nid: 2\n\n",
        b"",
        b"data: " + b"\r\n" * 3 + b"9" * 200_000 + b"\nid: 4\n\n",
        b"data: \xff\xfe\x00 ]\nid: 5\n\n",
    ]
    store = _store(redis_server)
    log = StreamLog(1 << 22)
    try:
        store.opened(StreamInfo("s4", "chat", "t"), log)
        log.add(events[:2], sum(map(len, events[:2])))  # two in one batch
        await _until(lambda: len(_entries(redis_server, "s4")) == 2)
        log.keep(events[2])  # one alone (and empty)
        await _until(lambda: len(_entries(redis_server, "s4")) == 3)
        log.add(events[3:], sum(map(len, events[3:])))  # taken at the end, not by a batch
        store.ended("s4", "complete", 6)
        await _until(lambda: len(_entries(redis_server, "s4")) == 6)
    finally:
        await store.close()
    entries = _entries(redis_server, "s4")
    assert [number for number, _ in entries] == [1, 2, 3, 4, 5, 6]
    assert [fields[b"d"] for _, fields in entries[:5]] == events


def _ttl_ms(server: RedisServer, key: str) -> int:
    client = redis.Redis.from_url(server.url)
    try:
        return int(client.pttl(key))  # type: ignore[arg-type]
    finally:
        client.close()


@pytest.mark.asyncio
async def test_a_streams_events_key_expires_from_its_first_event(
    redis_server: RedisServer,
) -> None:
    # Opened in one batch, its first events in a later one: a gateway that died before the
    # key's first refresh (a quarter of the TTL later) left a key that never expired.
    store = _store(redis_server, ttl="20s")
    log = StreamLog(1 << 20)
    try:
        store.opened(StreamInfo("s5", "chat", "t"), log)
        await _until(lambda: _meta(redis_server, "s5") != {})
        log.keep(b"data: a\nid: 1\n\n")
        await _until(lambda: len(_entries(redis_server, "s5")) == 1)
        assert 0 < _ttl_ms(redis_server, "ss:s5:e") <= 20_000
        store.opened(StreamInfo("s6", "chat", "t"), (several := StreamLog(1 << 20)))
        several.add([b"data: a\nid: 1\n\n", b"data: b\nid: 2\n\n"], 30)  # (as one operation)
        await _until(lambda: len(_entries(redis_server, "s6")) == 2)
        assert 0 < _ttl_ms(redis_server, "ss:s6:e") <= 20_000
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_streams_ending_together_go_to_redis_in_calls_within_the_bound(
    redis_server: RedisServer,
) -> None:
    # Each ending stream queues what its log holds; together they went out as one call of
    # many times the bound, holding Redis (and every replica's readers) as long.
    store = _store(redis_server, max_stream_bytes="4KiB")  # a batch's bound: 64 KiB
    calls: list[int] = []
    write = store.writes._write

    async def measured(keys: list[str], args: list[Any]) -> Any:
        calls.append(len(args[1]))
        return await write(keys=keys, args=args)

    store.writes._write = measured
    event = b"data: " + b"x" * 3_000 + b"\nid: %d\n\n"
    try:
        logs = [StreamLog(1 << 20) for _ in range(40)]
        for number, log in enumerate(logs):
            store.opened(StreamInfo(f"e{number}", "chat", "t"), log)
        await _until(lambda: bool(calls))
        for number, log in enumerate(logs):
            log.keep(event % 1)
            store.ended(f"e{number}", "complete", 2)
        await _until(lambda: all(len(_entries(redis_server, f"e{n}")) == 2 for n in range(40)))
    finally:
        await store.close()
    assert sum(calls) > 40 * 3_000
    assert max(calls) < 64 * 1024 + 8 * 1024  # (the bound, and the last command it took)
    assert all(_entries(redis_server, f"e{n}")[0][1][b"d"] == event % 1 for n in range(40))


@pytest.mark.asyncio
async def test_after_redis_comes_back_the_marks_of_lost_streams_are_written(
    tmp_path: Path,
) -> None:
    # Every stream broken while Redis was down: their "unresumable" marks waited in the
    # queue, and nothing woke the writer to send them. A reader elsewhere waited on a stream
    # that never ended; /healthz said down until the next stream started.
    server = RedisServer(tmp_path)
    store = _store(server)  # (Redis not started yet: the first batch is lost)
    log = StreamLog(1 << 20)
    try:
        store.opened(StreamInfo("s7", "chat", "t"), log)
        log.keep(b"data: a\nid: 1\n\n")
        await _until(lambda: not store.up)
        store.ended("s7", "complete", 2)
        server.start()
        await _until(lambda: store.up, timeout_s=10)
        await _until(lambda: _meta(server, "s7").get(b"gone") == b"unresumable")
    finally:
        await store.close()
        server.stop()


@pytest.mark.asyncio
async def test_a_batch_redis_dropped_mid_call_is_sent_again_once_it_is_back(
    tmp_path: Path,
) -> None:
    # A restart closes the connection a batch was sent on before its answer came: the
    # batch failed, and its streams were made unresumable, with Redis up again at once.
    server = RedisServer(tmp_path).start()
    store = _store(server)
    log = StreamLog(1 << 20)
    try:
        store.opened(StreamInfo("s8", "chat", "t"), log)
        log.keep(b"data: a\nid: 1\n\n")
        await _until(lambda: len(_entries(server, "s8")) == 1)
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)  # the next batch waits for its answer
        sent: list[int] = []
        write = store.writes._write

        async def noted(keys: list[str], args: list[Any]) -> Any:
            sent.append(len(args[1]))
            return await write(keys=keys, args=args)

        store.writes._write = noted
        log.keep(b"data: b\nid: 2\n\n")
        await _until(lambda: bool(sent))  # (the batch is out, its answer awaited)
        server.process.kill()  # the connection closes under the waiting batch
        server.process.wait()
        server.start()
        await _until(lambda: len(_entries(server, "s8")) == 1)  # (event 2, on a new Redis)
        assert store.up
        assert "s8" not in store.writes._broken
    finally:
        await store.close()
        server.stop()
