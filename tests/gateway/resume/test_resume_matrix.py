"""Resume in combination: {pacer} x {route} x {failover mid-stream} x {when the reader drops}.

Each case: a reader drops after some events, comes back (``Last-Event-ID``, or the Responses
API's ``starting_after``) and reads on; what it got in both reads must be the stream's own
record (a read from the start, once the stream is over), event for event, none twice, none
lost, ids 1, 2, 3, ... The labs run at the lab's 25 ms a token; the primary of the failover
gateway resets its connection after a few tokens, so the stream goes on on the fallback.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import MESSAGES, finished_truth, gateway_config, upstream
from tests.support.resume import Read, read_stream
from tests.support.threaded_app import ThreadedApp

pytestmark = pytest.mark.integration

CHAT_ONLY: dict[str, Any] = {"dialects": ["chat"]}
PACER = {"X-Steadystream-Pacer": "leaky:interval=5ms,capacity=100,tail=1s"}
TOKENS = 16
RESPONSES_ENDS = {"response.completed", "response.incomplete", "response.failed", "error"}
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def body_of(route: str) -> dict[str, Any]:
    if route == "responses":
        return {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": TOKENS}
    return {"model": "lab", "messages": MESSAGES, "stream": True, "max_tokens": TOKENS}


@pytest.fixture(scope="module")
def gateways() -> Iterator[dict[bool, GatewayServer]]:
    """Two gateways: {False: one upstream, True: a primary that resets after 5 tokens, and
    its fallback}. Every upstream speaks chat only: messages and responses are translated."""
    with (
        LabServer("steady", seed=7) as lab,
        LabServer("steady", seed=7) as fallback,
        GatewayServer(gateway_config(upstream(lab, "lab", **CHAT_ONLY))) as plain,
        GatewayServer(
            gateway_config(
                upstream(lab, "primary", fault="reset-after=5", **CHAT_ONLY),
                upstream(fallback, "fallback", fault="slow-first-token=0ms", priority=1,
                         **CHAT_ONLY),
                failover={"policy": "continue"},
            )
        ) as failing,
    ):  # fmt: skip
        yield {False: plain, True: failing}


def record_of(gw: GatewayServer, stream_id: str) -> Read:
    """The stream's events from its first, read once it is over."""
    return read_stream(gw.url, "GET", f"/v1/streams/{stream_id}")


def sequence_of(data: str) -> int:
    return int(orjson.loads(data)["sequence_number"])


def resume(gw: GatewayServer, route: str, first: Read, *, by_sequence: bool) -> Read:
    if by_sequence:  # the Responses API's own way back
        response_id = orjson.loads(first.events[0][1])["response"]["id"]
        after = sequence_of(first.events[-1][1])
        path = f"/v1/responses/{response_id}?stream=true&starting_after={after}"
        return read_stream(gw.url, "GET", path)
    return read_stream(
        gw.url, "GET", f"/v1/streams/{first.stream_id}", None, {"Last-Event-ID": first.last_id}
    )


CASES = [
    # (route, paced, failover, drop): pacing applies to chat (typed routes go unpaced)
    *[
        ("chat", paced, failover, drop)
        for paced in (False, True)
        for failover in (False, True)
        for drop in ("early", "mid", "after")
    ],
    *[
        (route, False, failover, drop)
        for route in ("messages", "responses")
        for failover in (False, True)
        for drop in ("early", "mid", "after")
    ],
    ("messages", True, False, "mid"),
    ("responses", True, True, "mid"),
]


@pytest.mark.parametrize(
    ("route", "paced", "failover", "drop"),
    CASES,
    ids=[f"{r}-{'paced' if p else 'raw'}-{'failover' if f else 'one'}-{d}" for r, p, f, d in CASES],
)
def test_dropped_and_resumed_reader_gets_the_stream_record(
    gateways: dict[bool, GatewayServer], route: str, paced: bool, failover: bool, drop: str
) -> None:
    gw = gateways[failover]
    request_id = f"m-{route}-{paced}-{failover}-{drop}"
    headers = {"X-Request-Id": request_id, **(PACER if paced else {})}
    leave_after = {"early": 2, "mid": 9, "after": 12}[drop]
    first = read_stream(
        gw.url, "POST", PATHS[route], body_of(route), headers, leave_after=leave_after
    )
    assert first.status == 200, first.body
    if drop == "after":  # come back once the generation is over
        record_of(gw, first.stream_id)  # (a read from the start returns at its end)
    by_sequence = route == "responses" and drop != "early"
    rest = resume(gw, route, first, by_sequence=by_sequence)
    assert rest.status == 200, rest.body
    whole = record_of(gw, first.stream_id)
    assert whole.status == 200, whole.body
    got = first.events + rest.events
    assert [i for i, _ in got] == [str(n) for n in range(1, len(got) + 1)]
    assert got == whole.events
    # The stream ended as its kind ends: [DONE], or the typed route's last event.
    last = whole.events[-1][1]
    if route == "chat":
        assert last == "[DONE]"
    elif route == "messages":
        assert orjson.loads(last)["type"] in {"message_stop", "error"}
    else:
        assert orjson.loads(last)["type"] in RESPONSES_ENDS


@pytest.mark.parametrize("paced", [False, True], ids=["raw", "paced"])
def test_uninterrupted_and_resumed_readers_agree_on_a_failover(paced: bool) -> None:
    """Two identical runs (fresh labs, same seed): the reader who dropped and came back got
    the same events, byte for byte, as the one who read it all. (Paced, how the text is cut
    into events depends on when it came, so two runs agree on the text, not the cuts.)"""
    # Only the primary's reset may fail a lab over: a busy machine's pause of either is no
    # stall, or the two runs would fail over at different tokens.
    patient = {"first_token": "60s", "stall": "60s"}
    runs: list[list[tuple[str | None, str]]] = []
    texts: list[str] = []
    for leave in (None, 7):
        with (
            LabServer("steady", seed=3) as lab,
            LabServer("steady", seed=3) as fallback,
            GatewayServer(
                gateway_config(
                    upstream(lab, "primary", fault="reset-after=5", timeouts=patient),
                    upstream(
                        fallback,
                        "fallback",
                        fault="slow-first-token=0ms",
                        priority=1,
                        timeouts=patient,
                    ),
                    failover={"policy": "continue"},
                )
            ) as gw,
        ):
            first = read_stream(
                gw.url, "POST", PATHS["chat"], body_of("chat"),
                {"X-Request-Id": "same", **(PACER if paced else {})}, leave_after=leave,
            )  # fmt: skip
            events = first.events
            if leave is not None:
                events = events + resume(gw, "chat", first, by_sequence=False).events
            finished_truth(fallback, "same.f1")
            runs.append([(i, _steady(d)) for i, d in events])
            texts.append(Read(200, {}, events).text)
    assert texts[0] == texts[1]
    if paced:
        assert [run[-1][1] for run in runs] == ["[DONE]", "[DONE]"]
    else:
        assert runs[0] == runs[1]


def _steady(data: str) -> str:
    """An event's data less what differs between two runs: the clock's ``created`` and, for
    two requests, the ids the gateway makes."""
    return re.sub(r'"(created|created_at|id|item_id)":("[^"]*"|\d+)', r'"\1":_', data)


WHOLE: dict[str, Any] = {
    "id": "chatcmpl-whole",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Steady streams feel fast, and calm."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17},
}


class WholeOnly(ThreadedApp):
    """Answers every stream request with one chat completion, as JSON."""

    what = "the upstream that never streams"

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(body=orjson.dumps(WHOLE), content_type="application/json")

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._answer)


@pytest.mark.parametrize(
    ("route", "paced"),
    [("chat", False), ("chat", True), ("messages", False), ("responses", False)],
    ids=["chat-raw", "chat-paced", "messages", "responses"],
)
def test_a_whole_body_upstream_resumes_as_the_stream_it_became(route: str, paced: bool) -> None:
    with (
        WholeOnly() as whole_only,
        GatewayServer(
            gateway_config({"name": "whole", "base_url": whole_only.base_url, **CHAT_ONLY})
        ) as gw,
    ):
        extra = PACER if paced else {}
        full = read_stream(gw.url, "POST", PATHS[route], body_of(route), extra)
        first = read_stream(gw.url, "POST", PATHS[route], body_of(route), extra, leave_after=2)
        rest = resume(gw, route, first, by_sequence=route == "responses")
        whole = record_of(gw, first.stream_id)
    got = first.events + rest.events
    assert [i for i, _ in got] == [str(n) for n in range(1, len(got) + 1)]
    assert got == whole.events
    assert [_steady(d) for _, d in got] == [_steady(d) for _, d in full.events]


@pytest.mark.parametrize("paced", [False, True], ids=["raw", "paced"])
def test_a_paced_stream_past_its_bound_is_never_a_silent_partial(paced: bool) -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(
            gateway_config(upstream(lab, "lab"), resume={"max_stream_bytes": 2048})
        ) as gw,
    ):
        extra = PACER if paced else {}
        first = read_stream(gw.url, "POST", PATHS["chat"], body_of("chat") | {"max_tokens": 60},
                            extra, leave_after=2)  # fmt: skip
        rest = resume(gw, "chat", first, by_sequence=False)
    if rest.status == 200:  # came back before the bound: told in the stream, no [DONE]
        assert orjson.loads(rest.events[-1][1])["error"]["code"] == "stream_too_large"
    else:
        assert rest.status == 410
        assert orjson.loads(rest.body)["error"]["code"] == "stream_too_large"


def test_a_paced_stream_resumes_through_redis(redis_server: Any) -> None:
    with (
        LabServer("steady") as lab,
        GatewayServer(
            gateway_config(upstream(lab, "lab"), resume={"store": redis_server.url})
        ) as gw,
    ):
        first = read_stream(gw.url, "POST", PATHS["chat"], body_of("chat"), PACER, leave_after=5)
        rest = resume(gw, "chat", first, by_sequence=False)
        whole = record_of(gw, first.stream_id)
    assert first.events + rest.events == whole.events
    assert whole.events[-1][1] == "[DONE]"


@pytest.mark.parametrize("route", ["messages", "responses"])
def test_a_translated_stream_retried_before_its_first_token_resumes_whole(route: str) -> None:
    with (
        LabServer("steady", seed=7) as lab,
        LabServer("steady", seed=7) as fallback,
        GatewayServer(
            gateway_config(
                upstream(lab, "primary", fault="reset-after=0", **CHAT_ONLY),
                upstream(fallback, "fallback", fault="slow-first-token=0ms", priority=1,
                         **CHAT_ONLY),
            )
        ) as gw,
    ):  # fmt: skip
        first = read_stream(gw.url, "POST", PATHS[route], body_of(route), leave_after=2)
        rest = resume(gw, route, first, by_sequence=route == "responses")
        whole = record_of(gw, first.stream_id)
    got = first.events + rest.events
    assert got == whole.events
    assert [i for i, _ in got] == [str(n) for n in range(1, len(got) + 1)]
    if route == "responses":
        assert [sequence_of(d) for _, d in got] == list(range(len(got)))


@pytest.mark.parametrize(
    "spec",
    [
        "leaky:interval=5ms,capacity=100,tail=1s",
        "phrase:cap=4,stagger=5ms,tail=1s",
        "flush:window=30ms",
        "rechunk:min_tokens=3,max_wait=30ms",
        "adaptive:min_buffer=2,max_delay=50ms,tail=1s",
    ],
    ids=["leaky", "phrase", "flush", "rechunk", "adaptive"],
)
def test_every_pacer_keeps_what_it_sent_through_a_failover(
    gateways: dict[bool, GatewayServer], spec: str
) -> None:
    """The paced writer numbers the events it sends (the line numbers none of a paced
    stream): a Last-Event-ID inside a paced burst resumes at the next paced event."""
    gw = gateways[True]
    headers = {"X-Request-Id": f"pacer-{spec[:5]}", "X-Steadystream-Pacer": spec}
    first = read_stream(gw.url, "POST", PATHS["chat"], body_of("chat"), headers, leave_after=6)
    rest = resume(gw, "chat", first, by_sequence=False)
    whole = record_of(gw, first.stream_id)
    got = first.events + rest.events
    assert [i for i, _ in got] == [str(n) for n in range(1, len(got) + 1)]
    assert got == whole.events
    assert got[-1][1] == "[DONE]"


@pytest.mark.parametrize("paced", [False, True], ids=["raw", "paced"])
def test_a_repeated_post_with_its_key_joins_after_the_last_event(
    gateways: dict[bool, GatewayServer], paced: bool
) -> None:
    gw = gateways[True]
    headers = {"Idempotency-Key": f"key-{paced}", **(PACER if paced else {})}
    first = read_stream(gw.url, "POST", PATHS["chat"], body_of("chat"), headers, leave_after=4)
    rest = read_stream(
        gw.url, "POST", PATHS["chat"], body_of("chat"), {**headers, "Last-Event-ID": first.last_id}
    )
    assert rest.stream_id == first.stream_id
    whole = record_of(gw, first.stream_id)
    assert first.events + rest.events == whole.events


@pytest.mark.parametrize("paced", [False, True], ids=["raw", "paced"])
def test_a_resume_that_races_the_end_gets_the_last_events_once(
    gateways: dict[bool, GatewayServer], paced: bool
) -> None:
    gw = gateways[False]
    extra = PACER if paced else {}
    total = len(read_stream(gw.url, "POST", PATHS["chat"], body_of("chat"), extra).events)
    for leave in (total - 2, total - 1):  # (a paced stream's count varies by a few events)
        first = read_stream(
            gw.url, "POST", PATHS["chat"], body_of("chat"), extra, leave_after=leave
        )
        rest = resume(gw, "chat", first, by_sequence=False)
        whole = record_of(gw, first.stream_id)
        assert first.events + rest.events == whole.events
        assert whole.events[-1][1] == "[DONE]"
