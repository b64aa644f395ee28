"""The Redis store with gateways in this process (two of them share one ``redis-server``, as
two replicas would): what test_redis.py proves with real processes, and what it cannot
arrange there: Redis going away mid-stream and coming back, a reader on the other gateway
cut off mid-read, keys an upstream echoes, tenants that pick the same ``Idempotency-Key``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import orjson
import pytest
import redis

from steadystream._processes import free_port
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer, RequestTruth
from tests.support.gateway import (
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    get,
    upstream,
    wait_for,
)
from tests.support.hostile import HostileUpstream
from tests.support.resume import Read, RedisServer, read_stream

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
SECRET = "sk-upstream-very-secret-0042"


@contextmanager
def gateways(
    count: int, upstream_entry: dict[str, Any], store: str, **sections: Any
) -> Iterator[list[GatewayServer]]:
    """``count`` gateways in this process sharing the store ``store``."""
    env = sections.pop("env", None)
    resume = {"store": store, **sections.pop("resume", {})}
    config = gateway_config(upstream_entry, resume=resume, **sections)
    with ExitStack() as stack:
        yield [stack.enter_context(GatewayServer(config, env=env)) for _ in range(count)]


def read_text(events: list[tuple[str | None, str]]) -> str:
    return "".join(orjson.loads(d)["choices"][0]["delta"].get("content", "") for _, d in events)


def health(url: str) -> dict[str, Any]:
    _, body = get(url, "/healthz")
    resume: dict[str, Any] = orjson.loads(body)["resume"]
    return resume


def store_up(url: str) -> float:
    _, body = get(url, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("steadystream_resume_store_up "):
            return float(line.split()[1])
    raise AssertionError("no steadystream_resume_store_up")


def test_a_reader_resumes_through_the_other_gateway(redis_server: RedisServer) -> None:
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        first = read_stream(
            a.url, "POST", CHAT, chat_body(100), {"X-Request-Id": "in-1"}, leave_after=40
        )
        rest = read_stream(
            b.url, "GET", f"/v1/streams/{first.stream_id}", None,
            {"Last-Event-ID": first.last_id},
        )  # fmt: skip
        truth = finished_truth(lab, "in-1")
        again = read_stream(b.url, "GET", f"/v1/streams/{first.stream_id}")
        past = read_stream(
            b.url, "GET", f"/v1/streams/{first.stream_id}", None, {"Last-Event-ID": "100000"}
        )
    assert first.ids == list(range(1, 41))
    assert rest.status == 200
    assert first.ids + rest.ids == list(range(1, rest.ids[-1] + 1))  # none twice, none lost
    assert first.text + rest.text == "".join(answer(truth))
    assert truth.tokens_generated == 100  # one generation, to its end
    assert again.events == first.events + rest.events  # the whole stream, kept
    assert past.status == 410
    assert orjson.loads(past.body)["error"]["code"] == "stream_unknown"


def dropped_then_read_on_b(
    redis_server: RedisServer,
    request_id: str,
    tokens: int,
    last_event_id: str | None = None,
    *,
    grace: str = "200ms",
) -> tuple[Read, Read, RequestTruth]:
    """A reader drops a stream on gateway a after 3 events (a's grace is ``grace``) and reads
    it on b from ``last_event_id`` (default: the last it had): both reads, and the truth."""
    with (
        LabServer("steady") as lab,
        gateways(2, upstream(lab, "lab"), redis_server.url, resume={"grace": grace}) as (a, b),
    ):
        first = read_stream(
            a.url, "POST", CHAT, chat_body(tokens), {"X-Request-Id": request_id}, leave_after=3
        )
        rest = read_stream(
            b.url, "GET", f"/v1/streams/{first.stream_id}", None,
            {"Last-Event-ID": last_event_id or first.last_id},
        )  # fmt: skip
        return first, rest, finished_truth(lab, request_id)


def test_a_reader_on_the_other_gateway_ahead_of_the_stream_is_refused_not_held(
    redis_server: RedisServer,
) -> None:
    # An event the running stream never sent: not waited for (the reader would be told
    # nothing, and hold the generation past its grace), refused once Redis could have it.
    _, ahead, truth = dropped_then_read_on_b(redis_server, "ahead-1", 400, "999999999999999999")
    assert ahead.status == 410
    assert orjson.loads(ahead.body)["error"]["code"] == "stream_unknown"
    assert truth.tokens_generated < 400  # the grace ran out: cancelled, not held


def test_a_reader_on_the_other_gateway_holds_the_generation_past_its_grace(
    redis_server: RedisServer,
) -> None:
    # The reader must be back on b within the grace: 1 s, not 200 ms, so that a busy
    # machine's pause between the two reads does not cancel the generation first.
    first, rest, truth = dropped_then_read_on_b(redis_server, "hold-1", 80, grace="1s")
    # 80 tokens take 2 s: the grace (1 s) passed long before the end, while b's reader read
    assert truth.finish_reason == "length"
    assert first.text + rest.text == "".join(answer(truth))


def test_a_repeated_post_on_the_other_gateway_joins_and_delete_reaches_the_owner(
    redis_server: RedisServer,
) -> None:
    key = {"Idempotency-Key": "k-in"}
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        body = chat_body(30)
        first = read_stream(
            a.url, "POST", CHAT, body, {**key, "X-Request-Id": "jn-1"}, leave_after=5
        )
        joined = read_stream(
            b.url, "POST", CHAT, body,
            {**key, "X-Request-Id": "jn-2", "Last-Event-ID": first.last_id},
        )  # fmt: skip
        truth = finished_truth(lab, "jn-1")
        second = lab.truth("jn-2")
        long = read_stream(
            a.url, "POST", CHAT, chat_body(400), {"X-Request-Id": "dl-1"}, leave_after=3
        )
        cancelled = read_stream(b.url, "DELETE", f"/v1/streams/{long.stream_id}")
        again = read_stream(b.url, "DELETE", f"/v1/streams/{long.stream_id}")  # (within one batch)
        long_truth = finished_truth(lab, "dl-1")
        # A stream Redis says runs, that no process runs (its owner died): nobody stopped it.
        client = redis.Redis.from_url(redis_server.url)
        try:
            meta = client.hgetall(f"ss:{long.stream_id}:m")
            client.hset(
                "ss:strm_orphan0000:m",
                mapping={"route": meta[b"route"], "tenant": meta[b"tenant"]},
            )
        finally:
            client.close()
        orphan = read_stream(b.url, "DELETE", "/v1/streams/strm_orphan0000")
    assert orjson.loads(again.body)["cancelled"] is False  # stopped already
    assert orphan.status == 200
    assert orjson.loads(orphan.body)["cancelled"] is False  # a listener is not an owner
    assert joined.stream_id == first.stream_id
    assert first.text + joined.text == "".join(answer(truth))
    assert second is None  # one generation
    assert orjson.loads(cancelled.body)["cancelled"] is True
    assert long_truth.finish_reason == "cancelled"


def test_a_responses_stream_is_found_through_the_other_gateway(redis_server: RedisServer) -> None:
    body = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 20}
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        whole = read_stream(a.url, "POST", "/v1/responses", body)
        response_id = orjson.loads(whole.events[0][1])["response"]["id"]
        rest = read_stream(
            b.url, "GET", f"/v1/responses/{response_id}?stream=true&starting_after=2"
        )
        cancel = read_stream(b.url, "POST", f"/v1/responses/{response_id}/cancel")
    assert rest.events == whole.events[3:]
    assert orjson.loads(cancel.body)["cancelled"] is False  # it is over


def test_a_stream_past_its_bound_or_unknown_gets_a_410_through_the_other_gateway(
    redis_server: RedisServer,
) -> None:
    with (
        LabServer("steady") as lab,
        gateways(
            2, upstream(lab, "lab"), redis_server.url, resume={"max_stream_bytes": "1KiB"}
        ) as (a, b),
    ):
        big = read_stream(a.url, "POST", CHAT, chat_body(30))
        too_large = read_stream(b.url, "GET", f"/v1/streams/{big.stream_id}")
        unknown = read_stream(b.url, "GET", "/v1/streams/strm_made_up")
    assert big.status == 200
    assert big.events[-1][1] == "[DONE]"  # its own reader got it all
    assert too_large.status == 410
    assert orjson.loads(too_large.body)["error"]["code"] == "stream_too_large"
    assert unknown.status == 410
    assert orjson.loads(unknown.body)["error"]["code"] == "stream_unknown"


def test_redis_down_mid_stream_then_back(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        before = read_stream(a.url, "POST", CHAT, chat_body(4))
        through = read_stream(
            a.url, "POST", CHAT, chat_body(60), {"X-Request-Id": "down-1"},
            when=(10, redis_server.stop),
        )  # fmt: skip
        wait_for(lambda: store_up(a.url) == 0 or None, what="a to see Redis down")
        down_health = health(a.url)
        during = read_stream(a.url, "POST", CHAT, chat_body(4))
        whole = read_stream(a.url, "POST", CHAT, {**chat_body(4), "stream": False})
        lost_elsewhere = read_stream(b.url, "GET", f"/v1/streams/{through.stream_id}")
        kept_here = read_stream(a.url, "GET", f"/v1/streams/{through.stream_id}")
        redis_server.start()

        def resumable_again() -> Any:
            after = read_stream(a.url, "POST", CHAT, chat_body(4))
            elsewhere = read_stream(b.url, "GET", f"/v1/streams/{after.stream_id}")
            return (after, elsewhere) if elsewhere.status == 200 else None

        after, elsewhere = wait_for(resumable_again, what="streams to be resumable again")
        up_health, up_metric = health(a.url), store_up(a.url)
        truth = finished_truth(lab, "down-1")
    # nothing else failed: every stream's reader got all of it, the whole answer too
    for read in (before, through, during):
        assert read.status == 200
        assert read.events[-1][1] == "[DONE]"
    assert through.text == "".join(answer(truth))
    assert whole.status == 200
    # the streams of the outage are not resumable elsewhere (410, never a partial); this
    # process still has its own copy
    assert lost_elsewhere.status == 410
    assert kept_here.status == 200
    assert kept_here.events == through.events
    assert down_health == {"store": "redis", "up": False}
    assert (up_health, up_metric) == ({"store": "redis", "up": True}, 1.0)
    assert elsewhere.events == after.events
    said = [r.getMessage() for r in caplog.records if "resume store (redis)" in r.getMessage()]
    # each gateway that wrote said so once, and once when it came back
    assert len([m for m in said if "unreachable" in m]) in (1, 2)
    assert len([m for m in said if "reachable again" in m]) >= 1
    assert SECRET not in caplog.text


def test_a_reader_on_the_other_gateway_cut_off_from_redis_is_told_in_band(
    redis_server: RedisServer,
) -> None:
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        first = read_stream(
            a.url, "POST", CHAT, chat_body(80), {"X-Request-Id": "cut-1"}, leave_after=2
        )
        rest = read_stream(
            b.url, "GET", f"/v1/streams/{first.stream_id}", None,
            {"Last-Event-ID": first.last_id}, when=(5, redis_server.stop),
        )  # fmt: skip
        truth = finished_truth(lab, "cut-1")
    assert rest.status == 200
    last = orjson.loads(rest.events[-1][1])
    assert last["error"]["code"] == "stream_unresumable"  # said, not a silent end
    got = first.text + read_text(rest.events[:-1])
    assert "".join(answer(truth)).startswith(got)
    ids = [int(i) for i, _ in rest.events[:-1] if i is not None]
    assert ids == list(range(3, 3 + len(ids)))


@pytest.mark.parametrize("mode", ["content-echo", "adv-split-reads", "adv-escaped-echo"])
def test_kept_events_are_scrubbed_as_the_client_got_them(
    redis_server: RedisServer, mode: str
) -> None:
    entry = {"name": "hostile", "api_key_env": "UPSTREAM_KEY"}
    with HostileUpstream() as hostile:
        entry["base_url"] = hostile.base_url
        with gateways(2, entry, redis_server.url, env={"UPSTREAM_KEY": SECRET}) as (a, b):
            first = read_stream(a.url, "POST", CHAT, chat_body(5, hostile=mode))
            here = read_stream(a.url, "GET", f"/v1/streams/{first.stream_id}")
            there = read_stream(b.url, "GET", f"/v1/streams/{first.stream_id}")
    client = redis.Redis.from_url(redis_server.url)
    try:
        kept = b"".join(d[b"d"] for _, d in client.xrange(f"ss:{first.stream_id}:e") if b"d" in d)
    finally:
        client.close()
    assert first.status == 200
    assert "***" in "".join(d for _, d in first.events)
    assert here.events == first.events  # memory: as the client got it
    assert there.events == first.events  # Redis: the same
    assert b"***" in kept
    for where in (str(first.events), str(here.events), str(there.events), kept.decode()):
        assert SECRET not in where
        assert SECRET[:12] not in where


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_the_same_idempotency_key_from_two_tenants_never_joins(
    redis_server: RedisServer, store: str
) -> None:
    env = {"A_KEY": "gw-a-123", "B_KEY": "gw-b-456"}
    tenants = [{"name": "a", "api_key_env": ["A_KEY"]}, {"name": "b", "api_key_env": ["B_KEY"]}]
    url = "memory" if store == "memory" else redis_server.url
    with (
        LabServer("steady") as lab,
        gateways(2, upstream(lab, "lab"), url, tenants=tenants, env=env) as (one, two),
    ):
        body = chat_body(6)
        key = {"Idempotency-Key": "same-key"}
        mine = read_stream(
            one.url, "POST", CHAT, body,
            {**key, "Authorization": "Bearer gw-a-123", "X-Request-Id": "ten-a"},
        )  # fmt: skip
        # (the other tenant, through the other gateway with Redis: where a join would be)
        theirs = read_stream(
            two.url if store == "redis" else one.url, "POST", CHAT, body,
            {**key, "Authorization": "Bearer gw-b-456", "X-Request-Id": "ten-b"},
        )  # fmt: skip
        truths = finished_truth(lab, "ten-a"), finished_truth(lab, "ten-b")
    assert mine.status == theirs.status == 200
    assert mine.stream_id != theirs.stream_id
    assert theirs.text == "".join(answer(truths[1]))  # its own generation
    assert mine.text == "".join(answer(truths[0]))


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_key_whose_request_was_refused_names_the_retry_so_a_repeat_joins_it(
    redis_server: RedisServer, store: str
) -> None:
    # The first request is refused (its upstream is not up yet); the retry runs, and a
    # repeat of the retry joins it: the key must name the retry now, not the refused one,
    # or every repeat starts a generation of its own.
    port = free_port()
    entry = {"name": "late", "base_url": f"http://127.0.0.1:{port}/v1"}
    url = "memory" if store == "memory" else redis_server.url
    body = chat_body(40)
    key = {"Idempotency-Key": "k-late"}
    with gateways(2, entry, url, failover={"before_first_token": False}) as (one, two):
        refused = read_stream(one.url, "POST", CHAT, body, {**key, "X-Request-Id": "late-0"})
        if store == "redis":  # said before the refusal went out, not in the next batch
            client = redis.Redis.from_url(redis_server.url)
            try:
                bound = [client.get(name) for name in client.scan_iter("ss:k:*")]
                named = [value.split()[0].decode() for value in bound if value]
                ended = [client.hget(f"ss:{stream}:m", "ended") for stream in named]
            finally:
                client.close()
            assert named
            assert ended == [b"refused"] * len(named)
        with LabServer("steady", port=port) as lab:
            retry = read_stream(
                two.url if store == "redis" else one.url, "POST", CHAT, body,
                {**key, "X-Request-Id": "late-1"}, leave_after=3,
            )  # fmt: skip
            repeat = read_stream(
                one.url, "POST", CHAT, body,
                {**key, "X-Request-Id": "late-2", "Last-Event-ID": retry.last_id},
            )  # fmt: skip
            truth = finished_truth(lab, "late-1")
            third = lab.truth("late-2")
    assert refused.status == 502
    assert retry.status == repeat.status == 200
    assert repeat.stream_id == retry.stream_id  # joined
    assert third is None  # one generation for the two
    assert retry.text + repeat.text == "".join(answer(truth))
