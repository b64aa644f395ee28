"""Readers come back to a stream through the gateway: ids, GET, Idempotency-Key, 410, DELETE.

The lab (25 ms a token) is the upstream; the gateway runs on loopback with the memory store.
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import orjson
import pytest

from steadystream._processes import free_port
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import (
    MESSAGES,
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    get,
    upstream,
)
from tests.support.resume import read_stream

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"


def metric(base_url: str, line: str) -> float:
    _, body = get(base_url, "/metrics")
    for text in body.decode().splitlines():
        if text.startswith(line + " "):
            return float(text.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, chat_body(8)),
        ("/v1/completions", {"model": "lab", "prompt": "hi", "stream": True, "max_tokens": 8}),
        ("/v1/responses", {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 8}),
        ("/v1/messages", {"model": "lab", "messages": MESSAGES, "stream": True, "max_tokens": 8}),
    ],
    ids=["chat", "completions", "responses", "messages"],
)
def test_every_event_carries_its_number_and_the_stream_is_named(
    path: str, body: dict[str, object]
) -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        read = read_stream(gw.url, "POST", path, body)
    assert read.status == 200
    assert read.stream_id.startswith("strm_")
    assert len(read.events) > 8
    assert [i for i, _ in read.events] == [str(n) for n in range(1, len(read.events) + 1)]


def test_a_reader_who_dropped_gets_the_rest_none_twice_none_lost() -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        first = read_stream(
            gw.url, "POST", CHAT, chat_body(60), {"X-Request-Id": "drop-1"}, leave_after=20
        )
        truth = finished_truth(lab, "drop-1")  # it ran to its end with no reader (grace)
        rest = read_stream(
            gw.url, "GET", f"/v1/streams/{first.stream_id}", None,
            {"Last-Event-ID": first.last_id},
        )  # fmt: skip
        resumes = metric(gw.url, 'steadystream_resumes_total{how="stream",route="chat"}')
        replayed = metric(gw.url, 'steadystream_resume_events_replayed_total{route="chat"}')
    assert rest.status == 200
    assert rest.stream_id == first.stream_id
    assert first.ids + rest.ids == list(range(1, rest.ids[-1] + 1))
    assert first.text + rest.text == "".join(answer(truth))
    assert truth.finish_reason == "length"  # the one generation ran to its end
    assert resumes == 1
    assert replayed >= 1


def test_a_repeated_post_joins_the_stream_in_flight() -> None:
    key = {"Idempotency-Key": "order-7"}
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        body = chat_body(40)
        first = read_stream(
            gw.url, "POST", CHAT, body, {**key, "X-Request-Id": "once-1"}, leave_after=10
        )
        again = read_stream(
            gw.url, "POST", CHAT, body,
            {**key, "X-Request-Id": "once-2", "Last-Event-ID": first.last_id},
        )  # fmt: skip
        whole = read_stream(gw.url, "POST", CHAT, body, {**key, "X-Request-Id": "once-3"})
        truth = finished_truth(lab, "once-1")
        second_generation = lab.truth("once-2"), lab.truth("once-3")
        other = read_stream(gw.url, "POST", CHAT, chat_body(5), key)
    assert again.stream_id == first.stream_id == whole.stream_id
    assert first.text + again.text == "".join(answer(truth)) == whole.text
    assert first.ids + again.ids == whole.ids
    assert second_generation == (None, None)  # the upstream saw one request
    assert other.status == 409
    assert b"Idempotency-Key" in other.body


def test_events_that_are_not_kept_get_a_410_naming_why() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), resume={"max_stream_bytes": "1KiB"})
        with GatewayServer(config) as gw:
            big = read_stream(gw.url, "POST", CHAT, chat_body(30))
            too_large = read_stream(gw.url, "GET", f"/v1/streams/{big.stream_id}")
            unknown = read_stream(gw.url, "GET", "/v1/streams/strm_made_up")
            bad = read_stream(
                gw.url, "GET", f"/v1/streams/{big.stream_id}", None, {"Last-Event-ID": "x"}
            )
    assert big.status == 200
    assert big.ids[-1] > 10
    assert too_large.status == 410
    error = orjson.loads(too_large.body)["error"]
    assert error["code"] == "stream_too_large"
    assert "resume.max_stream_bytes" in error["message"]
    assert unknown.status == 410
    assert orjson.loads(unknown.body)["error"]["code"] == "stream_unknown"
    assert bad.status == 400
    assert orjson.loads(bad.body)["error"]["param"] == "Last-Event-ID"


def test_another_tenants_stream_is_unknown() -> None:
    env = {"A_KEY": "gw-a-123", "B_KEY": "gw-b-456"}
    tenants = [{"name": "a", "api_key_env": ["A_KEY"]}, {"name": "b", "api_key_env": ["B_KEY"]}]
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), tenants=tenants)
        with GatewayServer(config, env=env) as gw:
            mine = read_stream(
                gw.url, "POST", CHAT, chat_body(4), {"Authorization": "Bearer gw-a-123"}
            )
            path = f"/v1/streams/{mine.stream_id}"
            theirs = read_stream(gw.url, "GET", path, None, {"Authorization": "Bearer gw-b-456"})
            again = read_stream(gw.url, "GET", path, None, {"Authorization": "Bearer gw-a-123"})
    assert theirs.status == 410
    assert again.status == 200
    assert again.ids == mine.ids


def test_delete_cancels_the_generation_at_once() -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        first = read_stream(
            gw.url, "POST", CHAT, chat_body(400), {"X-Request-Id": "del-1"}, leave_after=5
        )
        cancelled = read_stream(gw.url, "DELETE", f"/v1/streams/{first.stream_id}")
        truth = finished_truth(lab, "del-1")
    assert cancelled.status == 200
    assert orjson.loads(cancelled.body)["cancelled"] is True
    # Cancelled before its end: 400 tokens at the lab's 25 ms take 10 s, well within the 30 s
    # grace, so only the DELETE can have stopped it short.
    assert truth.finish_reason == "cancelled"
    assert truth.tokens_generated < 400


def test_a_responses_stream_comes_back_after_a_sequence_number() -> None:
    body = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 30}
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        whole = read_stream(gw.url, "POST", "/v1/responses", body)
        created = orjson.loads(whole.events[0][1])
        response_id = created["response"]["id"]
        path = f"/v1/responses/{response_id}?stream=true&starting_after=3"
        rest = read_stream(gw.url, "GET", path)
        cancel = read_stream(gw.url, "POST", f"/v1/responses/{response_id}/cancel")
        unknown = read_stream(gw.url, "GET", "/v1/responses/resp_nope?stream=true")
        twice = read_stream(gw.url, "GET", f"{path}&starting_after=5")
        same_twice = read_stream(gw.url, "GET", f"{path}&starting_after=3")
    numbers = [orjson.loads(d)["sequence_number"] for _, d in rest.events]
    assert numbers == [orjson.loads(d)["sequence_number"] for _, d in whole.events][4:]
    assert numbers[0] == 4
    assert rest.events == whole.events[4:]
    assert cancel.status == 200
    assert orjson.loads(cancel.body) == {
        "id": response_id,
        "object": "response",
        "cancelled": False,
    }
    assert unknown.status == 410
    assert twice.status == 400  # which one? either guess gives events twice or loses some
    assert orjson.loads(twice.body)["error"]["param"] == "starting_after"
    assert same_twice.events == rest.events


def test_with_resume_off_nothing_is_numbered() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), resume={"enabled": False})
        with GatewayServer(config) as gw:
            read = read_stream(gw.url, "POST", CHAT, chat_body(4))
            status, _ = get(gw.url, "/v1/streams/strm_x")
    assert read.status == 200
    assert read.ids == []
    assert "x-steadystream-stream-id" not in read.headers
    assert status == 404


def test_healthz_says_what_keeps_the_streams() -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        status, body = get(gw.url, "/healthz")
    assert status == 200
    assert orjson.loads(body)["resume"] == {"store": "memory", "up": True}


def test_an_idempotency_key_sent_twice_with_two_values_is_a_400() -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        url = urlsplit(gw.url)
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        try:
            connection.putrequest("POST", CHAT)
            body = orjson.dumps(chat_body(4))
            for name, value in (
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Idempotency-Key", "k-one"),
                ("Idempotency-Key", "k-two"),
            ):
                connection.putheader(name, value)
            connection.endheaders(body)
            response = connection.getresponse()
            error = orjson.loads(response.read())["error"]
        finally:
            connection.close()
        generations = lab.call_in_loop(lambda: len(lab.engine.truths))
    assert response.status == 400
    assert error["param"] == "Idempotency-Key"
    assert generations == 0  # nothing started


def test_a_refused_request_sent_again_with_its_key_is_tried_again() -> None:
    dead = {"name": "dead", "base_url": f"http://127.0.0.1:{free_port()}/v1"}
    config = gateway_config(dead, failover={"before_first_token": False})
    key = {"Idempotency-Key": "k-refused"}
    with GatewayServer(config) as gw:
        first = read_stream(gw.url, "POST", CHAT, chat_body(4), key)
        again = read_stream(gw.url, "POST", CHAT, chat_body(4), key)
    assert first.status == 502
    assert again.status == 502  # an error again, not an empty stream joined
    assert again.events == []


def test_a_head_is_no_reader_it_is_refused() -> None:
    # The router lets HEAD through with GET; a HEAD that joined as a reader would read
    # nothing, never be stuck, and hold the generation past the grace.
    body = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 8}
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        read = read_stream(gw.url, "POST", "/v1/responses", body)
        response_id = orjson.loads(read.events[0][1])["response"]["id"]
        resumes = metric(gw.url, 'steadystream_resumes_total{how="stream",route="responses"}')
        stream = read_stream(gw.url, "HEAD", f"/v1/streams/{read.stream_id}")
        response = read_stream(gw.url, "HEAD", f"/v1/responses/{response_id}?stream=true")
        after = metric(gw.url, 'steadystream_resumes_total{how="stream",route="responses"}')
    assert (stream.status, stream.headers["allow"]) == (405, "GET, DELETE")
    assert (response.status, response.headers["allow"]) == (405, "GET")
    assert after == resumes
