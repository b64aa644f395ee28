"""How a replay ends when it cannot end as its stream would have: the in-band error in the
stream's own API shape (the Responses API's ``error`` event, Anthropic's ``event: error``),
a stream that was never kept told so, and ``starting_after`` past the end of a stream."""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import orjson
import pytest
from openai.types.responses import ResponseErrorEvent
from prometheus_client import CollectorRegistry

from steadystream._clock import NS_PER_S, FakeClock
from steadystream.gateway import GatewayServer
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.hub import StreamHub
from steadystream.gateway.resume.log import StreamGone
from steadystream.lab import LabServer
from steadystream.protocol import SseEvent, new_decoder
from tests.support.gateway import chat_body, gateway_config, upstream, wait_for
from tests.support.resume import read_stream

# These tests are about replays, not the watchdog: a busy machine must not turn a slow first
# token into a refused request (the suite's default timeouts are test-sized).
PATIENT = {"first_token_timeout": "30s", "stall_timeout": "10s"}

CHAT = "/v1/chat/completions"
LONG_RESPONSE = {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": 400}
SHORT_RESPONSE = {**LONG_RESPONSE, "max_output_tokens": 12}
LONG_MESSAGE = {"model": "lab", "stream": True, "max_tokens": 400,
                "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip


def typed_events(base: str, path: str) -> list[SseEvent]:
    """A GET's SSE events whole, their ``event:`` names with them."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        decoder = new_decoder()
        return [item for item in decoder.feed(response.read()) if isinstance(item, SseEvent)]
    finally:
        connection.close()


def ended(gw: GatewayServer, stream_id: str) -> None:
    hub = gw.state.resume
    assert hub is not None
    wait_for(lambda: stream_id not in hub.live or None, what="the stream to end")


def sequence_of(data: str) -> int:
    number: Any = orjson.loads(data)["sequence_number"]
    assert isinstance(number, int)
    return number


@pytest.mark.integration
def test_a_cancelled_responses_stream_read_again_ends_with_the_responses_error_event() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        first = read_stream(gw.url, "POST", "/v1/responses", LONG_RESPONSE, leave_after=5)
        response_id = orjson.loads(first.events[0][1])["response"]["id"]
        read_stream(gw.url, "POST", f"/v1/responses/{response_id}/cancel")
        ended(gw, first.stream_id)
        events = typed_events(gw.url, f"/v1/responses/{response_id}?stream=true")
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0) as client:
            read = list(client.responses.retrieve(response_id, stream=True, starting_after=2))
    *kept, last = events
    assert last.event == "error"
    error = ResponseErrorEvent.model_validate_json(last.data)
    assert error.code == "stream_cancelled"
    assert "Responses cancel" in error.message
    assert error.sequence_number == sequence_of(kept[-1].data) + 1  # numbered on
    # the SDK reads it as the Responses API's error event (an `{"error": ...}` it raises on)
    assert isinstance(read[-1], ResponseErrorEvent)
    assert read[-1].sequence_number == error.sequence_number
    assert [event.sequence_number for event in read[:-1]] == [
        sequence_of(event.data) for event in kept[3:]
    ]


@pytest.mark.integration
def test_a_cancelled_messages_stream_read_again_ends_with_anthropics_error_event() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        first = read_stream(gw.url, "POST", "/v1/messages", LONG_MESSAGE, leave_after=5)
        read_stream(gw.url, "DELETE", f"/v1/streams/{first.stream_id}")
        ended(gw, first.stream_id)
        events = typed_events(gw.url, f"/v1/streams/{first.stream_id}")
    last = events[-1]
    assert last.event == "error"
    error = anthropic.types.ErrorResponse.model_validate_json(last.data)
    assert error.type == "error"
    assert error.error.type == "api_error"
    assert "the stream was cancelled" in error.error.message
    assert all(event.event != "message_stop" for event in events)


@pytest.mark.asyncio
async def test_a_stream_not_kept_because_every_kept_one_runs_is_told_it_was_not_kept() -> None:
    hub = StreamHub(ResumeConfig(max_streams=2), FakeClock(), GatewayMetrics(CollectorRegistry()))
    first, _ = hub.open("chat", "t"), hub.open("chat", "t")
    refused = hub.open("chat", "t")  # both kept ones run
    with pytest.raises(StreamGone) as gone:
        await anext(hub.local.follow(refused.stream_id, 0, NS_PER_S))
    assert gone.value.reason == "evicted"  # (410 stream_evicted, as before)
    assert "not kept" in gone.value.message
    assert "make room" not in gone.value.message
    refused.ended("complete")  # (its end changes nothing of why)
    with pytest.raises(StreamGone) as still:
        await anext(hub.local.follow(refused.stream_id, 0, NS_PER_S))
    assert "not kept" in still.value.message
    first.ended("complete")
    hub.open("chat", "t")  # the ended one is let go to make room: that one is told so
    with pytest.raises(StreamGone) as made_room:
        await anext(hub.local.follow(first.stream_id, 0, NS_PER_S))
    assert made_room.value.reason == "evicted"
    assert "make room" in made_room.value.message


@pytest.mark.integration
def test_a_stream_not_kept_gets_a_410_saying_it_was_not_kept() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), watchdog=PATIENT, resume={"max_streams": 1})
        with GatewayServer(config) as gw:
            running = read_stream(gw.url, "POST", CHAT, chat_body(400), leave_after=3)
            later = read_stream(gw.url, "POST", CHAT, chat_body(4))
            again = read_stream(gw.url, "GET", f"/v1/streams/{later.stream_id}")
            read_stream(gw.url, "DELETE", f"/v1/streams/{running.stream_id}")
    assert later.status == 200  # (served whole: only not kept)
    assert again.status == 410
    error = orjson.loads(again.body)["error"]
    assert error["code"] == "stream_evicted"
    assert "not kept" in error["message"]
    assert "make room" not in error["message"]


@pytest.mark.integration
def test_starting_after_past_the_end_of_an_ended_stream_is_a_410_as_last_event_id_is() -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        whole = read_stream(gw.url, "POST", "/v1/responses", SHORT_RESPONSE)
        response_id = orjson.loads(whole.events[0][1])["response"]["id"]
        last = sequence_of(whole.events[-1][1])
        path = f"/v1/responses/{response_id}?stream=true"
        past = read_stream(gw.url, "GET", f"{path}&starting_after={last + 1}")
        at_end = read_stream(gw.url, "GET", f"{path}&starting_after={last}")
        past_id = read_stream(gw.url, "GET", path, None, {"Last-Event-ID": str(len(whole.ids) + 1)})
        both = read_stream(
            gw.url, "GET", f"{path}&starting_after={last + 5}", None, {"Last-Event-ID": "2"}
        )
        read_all = read_stream(
            gw.url, "GET", f"{path}&starting_after={last + 5}", None,
            {"Last-Event-ID": whole.last_id},
        )  # fmt: skip
    for name, gone in (("past", past), ("past_id", past_id), ("both", both)):
        assert (name, gone.status) == (name, 410)
        assert orjson.loads(gone.body)["error"]["code"] == "stream_unknown"
        assert response_id.encode() in gone.body  # the name the caller used, only
        assert whole.stream_id.encode() not in gone.body
    assert b"sequence_number" in past.body
    assert at_end.status == 200
    assert at_end.events == []  # it read the last one: nothing more, as Last-Event-ID's
    assert read_all.status == 200  # (its Last-Event-ID says it read every event)
    assert read_all.events == []


@pytest.mark.integration
def test_starting_after_ahead_of_a_running_stream_here_is_a_410_as_last_event_id_is() -> None:
    # Every event is kept here before its reader gets it: a sequence_number past the kept
    # ones was never sent, as an id past them (through Redis from another process, both wait)
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT)) as gw,
    ):
        first = read_stream(gw.url, "POST", "/v1/responses", LONG_RESPONSE, leave_after=3)
        response_id = orjson.loads(first.events[0][1])["response"]["id"]
        path = f"/v1/responses/{response_id}?stream=true"
        ahead = read_stream(gw.url, "GET", f"{path}&starting_after=300")
        ahead_id = read_stream(gw.url, "GET", path, None, {"Last-Event-ID": "300"})
        hub = gw.state.resume
        assert hub is not None
        running = first.stream_id in hub.live
        within = read_stream(gw.url, "GET", f"{path}&starting_after=1", leave_after=2)
        read_stream(gw.url, "POST", f"/v1/responses/{response_id}/cancel")
    assert running
    for gone in (ahead, ahead_id):
        assert gone.status == 410
        assert orjson.loads(gone.body)["error"]["code"] == "stream_unknown"
    assert within.status == 200
    assert [sequence_of(data) for _, data in within.events][:2] == [2, 3]
