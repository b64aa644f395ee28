"""The memory store and the hub, in simulated time: replay, bounds, TTL, grace, the tax."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from steadystream._clock import NS_PER_S, FakeClock
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.hub import StreamHub
from steadystream.gateway.resume.log import StreamGone
from steadystream.gateway.resume.store import Claim, StreamInfo


def event(text: str = "x") -> bytes:
    return b"data: %s\n\n" % text.encode()


def hub_of(clock: FakeClock, **config: object) -> tuple[StreamHub, GatewayMetrics]:
    metrics = GatewayMetrics(CollectorRegistry())
    return StreamHub(ResumeConfig.model_validate(config), clock, metrics), metrics


def sample(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def take(events: AsyncIterator[bytes | None], count: int) -> list[bytes | None]:
    return [await anext(events) for _ in range(count)]


@pytest.mark.asyncio
async def test_a_reader_gets_every_event_after_its_last_then_the_live_ones() -> None:
    clock = FakeClock()
    hub, _ = hub_of(clock)
    live = hub.open("chat", "t")
    live.tee.stamp(event("a") + event("b") + event("c"))
    follow = hub.store_of(live.stream_id).follow(live.stream_id, 1, 10 * NS_PER_S)
    assert await take(follow, 2) == [b"", b"data: b\nid: 2\n\ndata: c\nid: 3\n\n"]
    waiting = asyncio.ensure_future(anext(follow))
    await asyncio.sleep(0)
    assert not waiting.done()
    live.tee.stamp(event("d"))
    assert await waiting == b"data: d\nid: 4\n\n"
    live.ended("complete")
    with pytest.raises(StopAsyncIteration):
        await anext(follow)


@pytest.mark.asyncio
async def test_a_reader_waiting_with_nothing_new_is_told_each_idle_interval() -> None:
    clock = FakeClock()
    hub, _ = hub_of(clock)
    live = hub.open("chat", "t")
    follow = hub.local.follow(live.stream_id, 0, 2 * NS_PER_S)
    assert await anext(follow) == b""
    waiting = asyncio.ensure_future(anext(follow))
    await clock.advance(NS_PER_S)
    assert not waiting.done()
    await clock.advance(NS_PER_S)
    assert await waiting is None  # the caller sends a keepalive
    await follow.aclose()


@pytest.mark.asyncio
async def test_a_stream_past_its_bound_is_gone_for_resumes_not_cut_short() -> None:
    clock = FakeClock()
    hub, _ = hub_of(clock, max_stream_bytes=1024)
    live = hub.open("chat", "t")
    sent = live.tee.stamp(event("y" * 2000))
    assert sent.endswith(b"id: 1\n\n")  # the client still gets it, numbered
    follow = hub.local.follow(live.stream_id, 0, NS_PER_S)
    with pytest.raises(StreamGone) as gone:
        await anext(follow)
    assert gone.value.reason == "too_large"
    assert "resume.max_stream_bytes" in gone.value.message


@pytest.mark.asyncio
async def test_ended_streams_are_kept_for_the_ttl_then_a_resume_is_told_they_expired() -> None:
    clock = FakeClock()
    hub, _ = hub_of(clock, ttl="10s")
    live = hub.open("chat", "t")
    hub.alias("t", "resp_1", live.stream_id)
    assert await hub.claim("k", Claim(live.stream_id, "body")) is None
    live.tee.stamp(event())
    live.ended("complete")
    await clock.advance(9 * NS_PER_S)
    kept = StreamInfo(live.stream_id, "chat", "t", "complete")
    assert await hub.info(live.stream_id) == kept
    assert hub.local.log(live.stream_id) is not None
    await clock.advance(2 * NS_PER_S)
    assert await hub.info(live.stream_id) == kept  # (its tenant still checked on a resume)
    assert hub.local.log(live.stream_id) is None  # its events are let go
    with pytest.raises(StreamGone) as gone:
        await anext(hub.local.follow(live.stream_id, 0, NS_PER_S))
    assert gone.value.reason == "expired"  # told why, not "unknown"
    assert "resume.ttl" in gone.value.message
    # Its response id still names it (a resume by it is told it expired, not "unknown"), and
    # its key is free: the request sent again is a new request.
    assert await hub.stream_of_response("t", "resp_1") == live.stream_id
    assert await hub.claim("k", Claim("strm_new", "body")) is None


@pytest.mark.asyncio
async def test_past_max_streams_the_longest_ended_goes_first_and_live_ones_stay() -> None:
    clock = FakeClock()
    hub, _ = hub_of(clock, max_streams=2)
    first, second = hub.open("chat", "t"), hub.open("chat", "t")
    first.ended("complete")
    third = hub.open("chat", "t")  # the ended one makes room
    with pytest.raises(StreamGone) as evicted:  # (and a resume is told so)
        await anext(hub.local.follow(first.stream_id, 0, NS_PER_S))
    assert evicted.value.reason == "evicted"
    fourth = hub.open("chat", "t")  # both kept ones run: this one is not kept
    assert await hub.info(second.stream_id) is not None
    assert await hub.info(third.stream_id) is not None
    with pytest.raises(StreamGone) as gone:
        await anext(hub.local.follow(fourth.stream_id, 0, NS_PER_S))
    assert gone.value.reason == "evicted"


@pytest.mark.asyncio
async def test_a_running_stream_not_kept_is_found_and_keeps_its_key_however_many_go() -> None:
    # Only max_streams streams gone are remembered; one not kept that still runs must stay
    # findable (a DELETE cancels it) and its key bound (a repeat joins it, no second
    # generation), however many streams come and go meanwhile.
    clock = FakeClock()
    hub, _ = hub_of(clock, max_streams=2)
    kept = [hub.open("chat", "t"), hub.open("chat", "t")]
    unkept = hub.open("chat", "t")  # both kept ones run
    assert await hub.claim("k", Claim(unkept.stream_id, "body")) is None
    for _ in range(5):  # more not kept, come and gone
        hub.open("chat", "t").ended("complete")
    info = await hub.info(unkept.stream_id)
    assert info is not None
    assert info.ended is None
    assert await hub.claim("k", Claim("strm_other", "body")) == Claim(unkept.stream_id, "body")
    with pytest.raises(StreamGone) as gone:
        await anext(hub.local.follow(unkept.stream_id, 0, NS_PER_S))
    assert gone.value.reason == "evicted"  # (told it is not kept, not "unknown")
    unkept.ended("complete")
    info = await hub.info(unkept.stream_id)
    assert info is not None
    assert info.ended == "complete"
    for live in kept:
        live.ended("complete")
    for _ in range(3):  # past the bound of streams gone: now it may be forgotten
        hub.open("chat", "t").ended("complete")
    assert await hub.info(unkept.stream_id) is None
    assert await hub.claim("k", Claim("strm_new", "body")) is None


@pytest.mark.asyncio
async def test_with_no_reader_the_generation_runs_for_the_grace_then_is_cancelled() -> None:
    clock = FakeClock()
    hub, metrics = hub_of(clock, grace="30s")
    live = hub.open("chat", "t")
    cancelled: list[int] = []
    tokens = [10]
    live.cancel = lambda: cancelled.append(clock.now_ns())
    live.tokens = lambda: tokens[0]
    assert live.reader_left()  # goes on without its reader
    tokens[0] = 25
    await clock.advance(29 * NS_PER_S)
    assert cancelled == []
    await clock.advance(NS_PER_S)
    assert cancelled == [30 * NS_PER_S]
    live.ended("cancelled")
    assert sample(metrics, "steadystream_resume_grace_expiries_total", route="chat") == 1
    assert sample(metrics, "steadystream_tokens_without_reader_total", route="chat") == 15


@pytest.mark.asyncio
async def test_a_reader_back_within_the_grace_keeps_the_generation() -> None:
    clock = FakeClock()
    hub, metrics = hub_of(clock, grace="30s")
    live = hub.open("chat", "t")
    cancelled: list[int] = []
    tokens = [0]
    live.cancel = lambda: cancelled.append(clock.now_ns())
    live.tokens = lambda: tokens[0]
    live.reader_left()
    tokens[0] = 7
    await clock.advance(20 * NS_PER_S)
    live.reader_came()
    await clock.advance(60 * NS_PER_S)
    assert cancelled == []
    assert sample(metrics, "steadystream_tokens_without_reader_total", route="chat") == 7
    assert sample(metrics, "steadystream_resume_grace_expiries_total", route="chat") == 0


def test_no_grace_means_cancel_at_once() -> None:
    hub, _ = hub_of(FakeClock(), grace=0)
    assert not hub.open("chat", "t").reader_left()


@pytest.mark.asyncio
async def test_an_idempotency_key_is_bound_once() -> None:
    hub, _ = hub_of(FakeClock())
    assert await hub.claim("k", Claim("strm_a", "body1")) is None
    assert await hub.claim("k", Claim("strm_b", "body2")) == Claim("strm_a", "body1")


@pytest.mark.asyncio
async def test_a_responses_stream_is_found_by_its_response_id() -> None:
    hub, _ = hub_of(FakeClock())
    live = hub.open("responses", "t")
    created = b'{"type":"response.created","sequence_number":0,"response":{"id":"resp_1"}}'
    live.tee.stamp(b"event: response.created\ndata: " + created + b"\n\n")
    assert await hub.stream_of_response("t", "resp_1") == live.stream_id
    assert live.tee.watch is None  # found: no more looking


def test_a_bad_store_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="redis://"):
        ResumeConfig.model_validate({"store": "postgres://x"})


class _Looking:
    """What ``_soon`` reads of the gateway: its clock, and whether a shared store is on."""

    def __init__(self, clock: FakeClock, shared: bool) -> None:
        self.clock = clock
        self.shared = object() if shared else None


@pytest.mark.asyncio
@pytest.mark.parametrize(("shared", "found_after_ms", "expected"), [
    (True, 120, "strm_x"),  # a replica's first batch lands: found, on another replica
    (True, 1_500, "strm_x"),  # a loaded replica's batch, a second and a half late
    (True, 2_500, None),  # never within two seconds: unknown
    (False, 120, None),  # one process: what it does not know now, it never will
])  # fmt: skip
async def test_a_stream_or_response_is_looked_for_again_while_the_shared_store_batches(
    shared: bool, found_after_ms: int, expected: str | None
) -> None:
    from steadystream.gateway.resume.routes import _soon

    clock = FakeClock()
    looked = _Looking(clock, shared)
    calls: list[int] = []

    async def look() -> str | None:
        calls.append(clock.now_ns())
        return "strm_x" if clock.now_ns() >= found_after_ms * 1_000_000 else None

    task = asyncio.ensure_future(_soon(looked, looked, look))  # type: ignore[arg-type]
    await clock.advance(3_000 * 1_000_000)
    assert await task == expected
    assert calls[-1] <= 2_100 * 1_000_000  # never past the two seconds (and a step)
    assert (len(calls) > 1) is shared


class _Shared:
    """A shared store that writes down what the hub and the tees give it."""

    def __init__(self) -> None:
        self.sources: dict[str, object] = {}
        self.appended: list[tuple[str, int, int]] = []
        self.ends: list[tuple[str, str, int]] = []

    def opened(self, info: StreamInfo, source: object = None) -> None:
        self.sources[info.stream_id] = source

    def append(self, stream_id: str, first_id: int, events: list[bytes], size: int) -> None:
        self.appended.append((stream_id, first_id, len(events)))

    def ended(self, stream_id: str, how: str, next_id: int) -> None:
        # (before the local store forgets a refused stream's log: the shared store may
        # still have to take its last events from it)
        self.ends.append((stream_id, how, next_id))


@pytest.mark.asyncio
async def test_the_shared_store_reads_kept_streams_from_their_logs_and_is_handed_the_rest() -> None:
    clock = FakeClock()
    shared = _Shared()
    metrics = GatewayMetrics(CollectorRegistry())
    hub = StreamHub(
        ResumeConfig.model_validate({"max_streams": 1}),
        clock,
        metrics,
        shared=shared,  # type: ignore[arg-type]
    )
    kept = hub.open("chat", "t")
    not_kept = hub.open("chat", "t")  # the one kept stream still runs: this one is not kept
    kept.tee.stamp(event("a"))
    not_kept.tee.stamp(event("b") + event("c"))
    assert shared.sources[kept.stream_id] is hub.local.log(kept.stream_id)  # read from there
    assert shared.sources[not_kept.stream_id] is None
    assert shared.appended == [(not_kept.stream_id, 1, 2)]  # handed, read by read
    not_kept.ended("complete")
    kept.ended("refused")
    assert shared.ends == [(not_kept.stream_id, "complete", 3), (kept.stream_id, "refused", 2)]
