"""Resume against clients that send what the happy path never does: a repeated POST with a
bad ``Last-Event-ID``, the header twice, ``DELETE`` twice, a stream that was cancelled read
again, another tenant's response ids, an empty ``starting_after``, a joiner of a request that
was refused."""

from __future__ import annotations

import asyncio
import http.client
from urllib.parse import urlsplit

import orjson
import pytest
from prometheus_client import CollectorRegistry

from steadystream._clock import NS_PER_S, FakeClock
from steadystream.gateway import GatewayServer
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.hub import REFUSED, StreamHub
from steadystream.gateway.resume.log import StreamGone
from steadystream.lab import LabServer
from tests.support.gateway import chat_body, gateway_config, upstream, wait_for
from tests.support.resume import read_stream

# These tests are about replays, not the watchdog: a busy machine must not turn a slow first
# token into a refused request (the suite's default timeouts are test-sized).
PATIENT = {"first_token_timeout": "30s", "stall_timeout": "10s"}

CHAT = "/v1/chat/completions"
RESPONSES_BODY = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 12}


def hub_of(clock: FakeClock, **config: object) -> StreamHub:
    return StreamHub(
        ResumeConfig.model_validate(config), clock, GatewayMetrics(CollectorRegistry())
    )


def _get_twice(base: str, path: str, name: str, values: list[str]) -> tuple[int, bytes]:
    """A GET that sends header ``name`` once per value."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        connection.putrequest("GET", path)
        for value in values:
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.integration
def test_a_repeated_post_with_a_bad_last_event_id_gets_a_400_not_a_500() -> None:
    key = {"Idempotency-Key": "bad-lei"}
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        read_stream(gw.url, "POST", CHAT, chat_body(4), key)
        again = read_stream(gw.url, "POST", CHAT, chat_body(4), {**key, "Last-Event-ID": "x"})
        messages = {"model": "lab", "stream": True, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
        read_stream(gw.url, "POST", "/v1/messages", messages, key)
        anthropic = read_stream(
            gw.url, "POST", "/v1/messages", messages, {**key, "Last-Event-ID": "-3"}
        )
    assert again.status == 400
    assert orjson.loads(again.body)["error"]["param"] == "Last-Event-ID"
    assert anthropic.status == 400
    error = orjson.loads(anthropic.body)
    assert error["type"] == "error"  # in the Messages API's shape
    assert "Last-Event-ID" in error["error"]["message"]


@pytest.mark.integration
def test_last_event_id_sent_twice_with_different_values_is_a_400() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        done = read_stream(gw.url, "POST", CHAT, chat_body(6))
        path = f"/v1/streams/{done.stream_id}"
        differ = _get_twice(gw.url, path, "Last-Event-ID", ["4", "2"])
        same = _get_twice(gw.url, path, "Last-Event-ID", ["4", "4"])
    # which one did the reader see last? Neither guess is safe: one gives events twice,
    # the other loses some
    assert differ[0] == 400
    error = orjson.loads(differ[1])["error"]
    assert error["param"] == "Last-Event-ID"
    assert "different" in error["message"]
    assert same[0] == 200


@pytest.mark.asyncio
async def test_a_second_stop_says_the_generation_was_already_stopped() -> None:
    hub = hub_of(FakeClock())
    live = hub.open("chat", "t")
    cancels: list[int] = []
    live.cancel = lambda: cancels.append(1)
    assert live.stop() is True
    assert live.stop() is False  # (the relay has not ended the stream yet)
    assert cancels == [1]


@pytest.mark.integration
def test_delete_twice_says_cancelled_once() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        first = read_stream(gw.url, "POST", CHAT, chat_body(400), leave_after=3)
        path = f"/v1/streams/{first.stream_id}"
        answers = [read_stream(gw.url, "DELETE", path) for _ in range(2)]
    assert [orjson.loads(a.body)["cancelled"] for a in answers] == [True, False]


@pytest.mark.integration
def test_a_stream_cut_by_its_grace_is_read_again_with_an_error_not_a_silent_partial() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), watchdog=PATIENT, resume={"grace": "100ms"})
        with GatewayServer(config) as gw:
            first = read_stream(gw.url, "POST", CHAT, chat_body(400), leave_after=3)
            hub = gw.state.resume
            assert hub is not None
            wait_for(lambda: first.stream_id not in hub.live or None, what="the grace to cut it")
            again = read_stream(gw.url, "GET", f"/v1/streams/{first.stream_id}")
    assert again.status == 200
    ids, last = again.events[:-1], again.events[-1]
    assert [i for i, _ in ids] == [str(n) for n in range(1, len(ids) + 1)]
    assert all(data != "[DONE]" for _, data in again.events)
    error = orjson.loads(last[1])["error"]
    assert error["code"] == "stream_cancelled"
    assert "resume.grace" in error["message"]


@pytest.mark.integration
def test_a_reader_attached_when_delete_comes_is_told_the_stream_was_cancelled() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        first = read_stream(gw.url, "POST", CHAT, chat_body(400), leave_after=3)
        path = f"/v1/streams/{first.stream_id}"

        def delete() -> None:
            read_stream(gw.url, "DELETE", path)

        attached = read_stream(
            gw.url, "GET", path, None, {"Last-Event-ID": first.last_id}, when=(2, delete)
        )
    assert attached.status == 200
    assert attached.ids[0] == first.ids[-1] + 1
    error = orjson.loads(attached.events[-1][1])["error"]
    assert error["code"] == "stream_cancelled"
    assert "DELETE" in error["message"]


TENANTS = [{"name": "a", "api_key_env": ["A_KEY"]}, {"name": "b", "api_key_env": ["B_KEY"]}]
ENV = {"A_KEY": "gw-a-123", "B_KEY": "gw-b-456"}
AS_A = {"Authorization": "Bearer gw-a-123"}
AS_B = {"Authorization": "Bearer gw-b-456"}


@pytest.mark.integration
def test_another_tenant_cannot_take_a_response_id_nor_learn_a_stream_id() -> None:
    # Translated from chat, a response's id is made from the request id, which the client
    # picks: tenant b sends a's request id again.
    with LabServer("steady") as lab:
        chat_only = {**upstream(lab, "lab"), "dialects": ["chat"]}
        config = gateway_config(chat_only, tenants=TENANTS)
        with GatewayServer(config, env=ENV) as gw:
            mine = read_stream(
                gw.url, "POST", "/v1/responses", RESPONSES_BODY, {**AS_A, "X-Request-Id": "r-1"}
            )
            response_id = orjson.loads(mine.events[0][1])["response"]["id"]
            theirs = read_stream(
                gw.url, "POST", "/v1/responses", RESPONSES_BODY, {**AS_B, "X-Request-Id": "r-1"}
            )
            path = f"/v1/responses/{response_id}?stream=true"
            again = read_stream(gw.url, "GET", path, None, AS_A)
            cancel = read_stream(gw.url, "POST", f"/v1/responses/{response_id}/cancel", None, AS_A)
            b_again = read_stream(gw.url, "GET", path, None, AS_B)
    assert orjson.loads(theirs.events[0][1])["response"]["id"] == response_id
    assert again.status == 200
    assert again.events == mine.events
    assert cancel.status == 200
    assert orjson.loads(cancel.body)["id"] == response_id  # named as the caller named it
    assert b_again.events == theirs.events  # each tenant's id names its own stream
    assert b_again.stream_id == theirs.stream_id != mine.stream_id


@pytest.mark.asyncio
async def test_a_response_id_names_a_stream_per_tenant() -> None:
    hub = hub_of(FakeClock(), max_streams=2)
    created = b'{"type":"response.created","sequence_number":0,"response":{"id":"resp_1"}}'
    first, second = hub.open("responses", "a"), hub.open("responses", "b")
    for live in (first, second):
        live.tee.stamp(b"event: response.created\ndata: " + created + b"\n\n")
    assert await hub.stream_of_response("a", "resp_1") == first.stream_id
    assert await hub.stream_of_response("b", "resp_1") == second.stream_id
    assert await hub.stream_of_response("c", "resp_1") is None


@pytest.mark.asyncio
async def test_a_response_id_used_again_keeps_naming_the_newer_stream() -> None:
    clock = FakeClock()
    hub = hub_of(clock, max_streams=2)
    created = b'{"type":"response.created","sequence_number":0,"response":{"id":"resp_1"}}'
    older = hub.open("responses", "a")
    older.tee.stamp(b"event: response.created\ndata: " + created + b"\n\n")
    older.ended("complete")
    newer = hub.open("responses", "a")
    newer.tee.stamp(b"event: response.created\ndata: " + created + b"\n\n")
    assert await hub.stream_of_response("a", "resp_1") == newer.stream_id
    hub.open("responses", "a")  # the older one is let go to make room...
    assert hub.local.log(older.stream_id) is None
    # ...and the name it shared is not taken from the newer one with it
    assert await hub.stream_of_response("a", "resp_1") == newer.stream_id


@pytest.mark.integration
def test_a_410_on_the_responses_route_quotes_the_response_id_not_the_stream_id() -> None:
    with LabServer("steady") as lab:
        chat_only = {**upstream(lab, "lab"), "dialects": ["chat"]}
        config = gateway_config(chat_only, tenants=TENANTS)
        with GatewayServer(config, env=ENV) as gw:
            mine = read_stream(
                gw.url, "POST", "/v1/responses", RESPONSES_BODY, {**AS_A, "X-Request-Id": "r-2"}
            )
            response_id = orjson.loads(mine.events[0][1])["response"]["id"]
            theirs = read_stream(
                gw.url, "GET", f"/v1/responses/{response_id}?stream=true", None, AS_B
            )
    assert theirs.status == 410
    assert orjson.loads(theirs.body)["error"]["code"] == "stream_unknown"
    assert mine.stream_id.encode() not in theirs.body
    assert response_id.encode() in theirs.body


@pytest.mark.integration
def test_an_empty_starting_after_is_a_400_not_a_skipped_first_event() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        whole = read_stream(gw.url, "POST", "/v1/responses", RESPONSES_BODY)
        response_id = orjson.loads(whole.events[0][1])["response"]["id"]
        path = f"/v1/responses/{response_id}?stream=true"
        empty = read_stream(gw.url, "GET", path + "&starting_after=")
        absent = read_stream(gw.url, "GET", path)
    assert empty.status == 400
    assert orjson.loads(empty.body)["error"]["param"] == "starting_after"
    assert absent.events == whole.events  # response.created (sequence 0) included


@pytest.mark.asyncio
async def test_a_reader_of_a_request_that_was_refused_is_not_told_its_ttl_passed() -> None:
    clock = FakeClock()
    hub = hub_of(clock)
    live = hub.open("chat", "t")
    follow = hub.local.follow(live.stream_id, 0, 10 * NS_PER_S)
    assert await anext(follow) == b""
    waiting = asyncio.ensure_future(anext(follow))
    await asyncio.sleep(0)
    live.ended(REFUSED)  # (the first request got an error; a repeat joined it meanwhile)
    with pytest.raises(StreamGone) as gone:
        await waiting
    assert gone.value.reason == "unresumable"
    assert "resume.ttl" not in gone.value.message
    assert "error" in gone.value.message


@pytest.mark.integration
def test_an_event_source_back_on_a_responses_url_gets_nothing_twice() -> None:
    # A browser's EventSource reconnects to the URL it began with, its starting_after
    # unchanged, and sends the id of the event it read last.
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        whole = read_stream(gw.url, "POST", "/v1/responses", RESPONSES_BODY)
        response_id = orjson.loads(whole.events[0][1])["response"]["id"]
        path = f"/v1/responses/{response_id}?stream=true&starting_after=1"
        first = read_stream(gw.url, "GET", path, leave_after=3)
        back = read_stream(gw.url, "GET", path, None, {"Last-Event-ID": first.last_id})
        early = read_stream(gw.url, "GET", path, None, {"Last-Event-ID": "1"})
    assert first.ids + back.ids == whole.ids[2:]
    assert first.events + back.events == whole.events[2:]
    assert early.events == whole.events[2:]  # (starting_after is the later one there)
