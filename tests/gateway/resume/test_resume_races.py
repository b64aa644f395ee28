"""Resume under races and out of order: readers at once, repeats at once, a reader ahead of
the stream through the other gateway, a reader who stops reading an ended stream's replay.

Each test starts its servers (the lab or a scripted upstream, gateways, ``redis-server``)
on 127.0.0.1 and stops them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import orjson
import pytest
from aiohttp import web

from steadystream._clock import NS_PER_S, FakeClock
from steadystream.gateway import GatewayServer
from steadystream.gateway.resume.stuck import StuckReader
from steadystream.lab import LabServer
from tests.support.gateway import (
    answer,
    chat_body,
    connect,
    finished_truth,
    gateway_config,
    upstream,
    wait_for,
)
from tests.support.resume import Read, RedisServer, read_stream
from tests.support.threaded_app import ThreadedApp

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
# These tests are about replays, not the watchdog: a busy machine must not turn a slow first
# token into a refused request.
PATIENT = {"first_token_timeout": "30s", "stall_timeout": "10s"}


@contextmanager
def gateways(count: int, entry: dict[str, Any], store: str, **sections: Any) -> Iterator[list[str]]:
    """``count`` gateways in this process sharing the store ``store``: their URLs."""
    resume = {"store": store, **sections.pop("resume", {})}
    config = gateway_config(entry, resume=resume, watchdog=PATIENT, **sections)
    with ExitStack() as stack:
        yield [stack.enter_context(GatewayServer(config)).url for _ in range(count)]


def at_once(*calls: Any) -> list[Read]:
    """Each ``(function, args...)`` in a thread of its own, started together; the results."""
    results: list[Any] = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(at: int) -> None:
        function, *args = calls[at]
        barrier.wait(10)
        results[at] = function(*args)

    threads = [threading.Thread(target=run, args=(at,)) for at in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_repeats_at_once_on_two_gateways_join_one_generation_and_read_it_whole(
    redis_server: RedisServer,
) -> None:
    body = chat_body(30)
    key = {"Idempotency-Key": "races-1"}
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        reads = at_once(
            *((read_stream, (a, b)[n % 2], "POST", CHAT, body, {**key, "X-Request-Id": f"rc-{n}"})
              for n in range(6))
        )  # fmt: skip
        other = read_stream(a, "POST", CHAT, chat_body(31), key)  # the key, another body
        asked = [n for n in range(6) if lab.truth(f"rc-{n}") is not None]
        truth = finished_truth(lab, f"rc-{asked[0]}")
    assert len(asked) == 1  # the upstream saw one request
    assert {read.stream_id for read in reads} == {reads[0].stream_id}
    whole = reads[0].events
    assert [read.events for read in reads] == [whole] * 6  # every reader, every event once
    assert [int(i) for i, _ in whole if i] == list(range(1, len(whole) + 1))
    assert reads[0].text == "".join(answer(truth))
    assert other.status == 409
    assert orjson.loads(other.body)["error"]["code"] == "idempotency_key_reused"


def test_two_readers_at_once_on_two_gateways_get_the_live_stream_whole(
    redis_server: RedisServer,
) -> None:
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        first = read_stream(
            a, "POST", CHAT, chat_body(60), {"X-Request-Id": "two-r"}, leave_after=5
        )
        path = f"/v1/streams/{first.stream_id}"
        since = {"Last-Event-ID": first.last_id}
        here, there = at_once((read_stream, a, "GET", path, None, since),
                              (read_stream, b, "GET", path, None, since))  # fmt: skip
        truth = finished_truth(lab, "two-r")
    assert here.status == there.status == 200
    assert here.events == there.events  # the same bytes through either gateway, in order
    assert first.ids + here.ids == list(range(1, len(first.ids) + len(here.ids) + 1))
    assert first.text + here.text == "".join(answer(truth))
    assert truth.tokens_generated == 60  # one generation, to its end


def test_starting_after_past_a_live_stream_through_the_other_gateway_is_refused_not_held(
    redis_server: RedisServer,
) -> None:
    # Through the gateway that runs it, a starting_after the stream has not reached is a
    # 410 at once; through the other one it was waited for with keepalives only, to an
    # empty 200 at the stream's end, holding the generation past its grace all along.
    body = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 400}
    with (
        LabServer("steady") as lab,
        gateways(2, upstream(lab, "lab"), redis_server.url, resume={"grace": "200ms"}) as (a, b),
    ):
        first = read_stream(
            a, "POST", "/v1/responses", body, {"X-Request-Id": "ahead-r"}, leave_after=3
        )
        response_id = orjson.loads(first.events[0][1])["response"]["id"]
        ahead = read_stream(
            b, "GET", f"/v1/responses/{response_id}?stream=true&starting_after=100000",
            None, {"Last-Event-ID": first.last_id},
        )  # fmt: skip
        truth = finished_truth(lab, "ahead-r")
    assert ahead.status == 410
    error = orjson.loads(ahead.body)["error"]
    assert error["code"] == "stream_unknown"
    assert "sequence_number 100000" in error["message"]
    assert truth.tokens_generated < 400  # the grace ran out: cancelled, not held


def test_starting_after_within_a_live_stream_through_the_other_gateway_is_served(
    redis_server: RedisServer,
) -> None:
    body = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 40}
    with LabServer("steady") as lab, gateways(2, upstream(lab, "lab"), redis_server.url) as (a, b):
        first = read_stream(
            a, "POST", "/v1/responses", body, {"X-Request-Id": "within-r"}, leave_after=6
        )
        response_id = orjson.loads(first.events[0][1])["response"]["id"]
        rest = read_stream(
            b, "GET", f"/v1/responses/{response_id}?stream=true&starting_after=3"
        )  # (odd, and before what the reader read: from sequence_number 4 on)
        whole = read_stream(a, "GET", f"/v1/streams/{first.stream_id}")
    assert rest.status == 200
    assert rest.events == whole.events[4:]
    assert orjson.loads(whole.events[-1][1])["type"] == "response.incomplete"  # (its length)


def _chunk(text: str, finish: str | None = None) -> bytes:
    delta = {} if finish else {"content": text}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "lab",
             "choices": [choice]}  # fmt: skip
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class LongUpstream(ThreadedApp):
    """A chat upstream that sends ``count`` events of about 1 kB each, as fast as it can."""

    what = "the long upstream"

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(self.count):
            await response.write(_chunk(f"{n:06d}" + "x" * 1000))
        await response.write(_chunk("", finish="stop") + b"data: [DONE]\n\n")
        return response

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)


def test_a_reader_who_reads_nothing_of_an_ended_streams_replay_is_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The kept events went to the server in one write and only the last write waited for
    # the reader to drain, with no bound: the gateway held the replay (600 kB here) and its
    # connection for as long as the reader kept it open, never cut.
    caplog.set_level(logging.INFO, logger="steadystream.gateway")
    with (
        LongUpstream(600) as up,
        GatewayServer(
            gateway_config(
                {"name": "long", "base_url": up.base_url},
                watchdog=PATIENT,
                limits={"stuck_timeout": "300ms"},
                resume={"max_stream_bytes": "4MiB"},
            )
        ) as gw,
    ):
        whole = read_stream(gw.url, "POST", CHAT, chat_body(5))
        port = gw.url.rsplit(":", 1)[1]
        with connect(gw.url, rcvbuf=4096) as sock:
            sock.sendall(
                f"GET /v1/streams/{whole.stream_id} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\n\r\n".encode()
            )
            wait_for(
                lambda: "a resumed reader read nothing; cut" in caplog.text or None,
                what="the stuck reader to be cut",
            )
            got = b""
            try:
                while chunk := sock.recv(65536):
                    got += chunk
            except (TimeoutError, ConnectionResetError):
                pass
    assert len(whole.events) == 602
    assert got.startswith(b"HTTP/1.1 200")
    assert not got.endswith(b"\r\n0\r\n\r\n")  # cut, not the whole replay


@pytest.mark.asyncio
async def test_a_reader_who_drains_slowly_is_not_cut_and_one_who_drains_nothing_is() -> None:
    clock = FakeClock()
    unsent = [100_000]  # what the reader's connection holds that it has not taken
    reader = StuckReader(clock, 4 * NS_PER_S, lambda: unsent[0])

    async def replay() -> None:
        reader.watch()
        reader.sending()
        await asyncio.Event().wait()  # a write the reader does not finish

    task = asyncio.ensure_future(replay())
    await asyncio.sleep(0)
    for _ in range(12):  # 12 s of a reader who takes a few bytes a second
        unsent[0] -= 10
        await clock.advance(NS_PER_S)
    assert not task.done()
    assert not reader.cut
    await clock.advance(4 * NS_PER_S)  # then nothing
    await clock.advance(NS_PER_S)
    await asyncio.sleep(0)
    assert reader.cut
    assert task.cancelled()
    reader.stop()
