"""The replay's Responses API and Anthropic Messages routes over real loopback sockets, read
by the official ``openai`` and ``anthropic`` SDKs: the recorded text, its recorded gaps (and
an injected pause) against the replay's ground truth, whole answers, and refused requests in
each API's error shape."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import numpy as np
import openai
import pytest

from steadystream import Event, EventKind, Timeline
from steadystream.lab.truth import RequestTruth
from steadystream.replay import ReplayServer, parse_injection

pytestmark = pytest.mark.integration

MS = 1_000_000
# A recorded stream: its chunking (one text per event), a 250 ms pause after the third event,
# and the pause the replay injects before token 6 (200 ms more before the seventh event).
TIMES_MS = [30.0, 50.0, 70.0, 320.0, 340.0, 360.0, 380.0, 400.0]
TEXTS = ["Pauses ", "are ", "what ", "readers ", "notice", ", ", "not ", "speed."]
TEXT = "".join(TEXTS)
INJECTED_MS = 200.0
HI: list[Any] = [{"role": "user", "content": "Tell me about pauses."}]


def recorded() -> Timeline:
    events = [Event(0, "", 0, EventKind.ROLE, None)]
    events += [
        Event(round(t * MS), text, 1, EventKind.CONTENT, None)
        for t, text in zip(TIMES_MS, TEXTS, strict=True)
    ]
    return Timeline.from_events(events, stream_id="rec-1")


@pytest.fixture(scope="module")
def replay() -> Iterator[ReplayServer]:
    with ReplayServer([recorded()], injections=[parse_injection("pause:200ms@token=6")]) as server:
        yield server


@pytest.fixture(scope="module")
def oai(replay: ReplayServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=replay.base_url, api_key="replay", max_retries=0, timeout=15
    ) as client:
        # A first stream pays the SDK's one-time costs (lazy imports, on a loaded machine
        # tens of ms) that the timed reads below should not.
        for _ in client.responses.create(model="any", input="warm", stream=True):
            pass
        yield client


@pytest.fixture(scope="module")
def claude(replay: ReplayServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=replay.url, api_key="replay", max_retries=0, timeout=15
    ) as client:
        with client.messages.stream(model="any", max_tokens=5, messages=HI) as stream:
            stream.until_done()  # the SDK's one-time costs, as above
        yield client


def _truth(replay: ReplayServer, request_id: str) -> RequestTruth:
    """The ground truth once the request is done (polls briefly)."""
    deadline = time.monotonic() + 10
    while True:
        truth = replay.truth(request_id)
        if truth is not None and truth.stream_done:
            return truth
        assert time.monotonic() < deadline, f"{request_id} did not finish"
        time.sleep(0.02)


def _content_planned(truth: RequestTruth) -> np.ndarray:
    kinds = np.asarray(truth.kinds)
    planned: np.ndarray = np.asarray(truth.planned_ns)[kinds == EventKind.CONTENT]
    return planned


def _check_timing(truth: RequestTruth, arrivals: list[int]) -> None:
    """The truth plans the recorded gaps plus the injected pause; the client saw them."""
    planned = _content_planned(truth)
    expected = np.diff(np.array(TIMES_MS) * MS)
    expected[5] += INJECTED_MS * MS  # the gap that ends at the seventh event
    assert np.array_equal(np.diff(planned), expected.round().astype(np.int64))
    assert truth.causes[list(truth.kinds).index(EventKind.CONTENT) + 6] != ()
    kinds = np.asarray(truth.kinds)
    written = np.asarray(truth.written_ns)[kinds == EventKind.CONTENT]
    assert np.abs(written - planned).max() <= 100 * MS  # written when planned
    seen = np.diff(np.array(arrivals))
    assert len(seen) == len(expected)  # one delta per recorded event: the chunking kept
    # Roughly, on a loaded machine: the two long pauses come back, and the whole span.
    for index in (2, 5):
        assert abs(seen[index] - expected[index]) <= 100 * MS, (index, seen, expected)
    assert abs(int(seen.sum()) - int(expected.sum())) <= 150 * MS


# -- the Responses API ------------------------------------------------------------------------


@pytest.mark.serial  # gaps to 100 ms of the recording's: run alone (make test)
def test_the_openai_sdk_reads_the_recorded_text_with_its_gaps(
    replay: ReplayServer, oai: openai.OpenAI
) -> None:
    stream = oai.responses.create(
        model="any", input="hi", stream=True, extra_headers={"X-Request-Id": "rd-1"}
    )
    deltas: list[str] = []
    arrivals: list[int] = []
    types: list[str] = []
    for event in stream:
        types.append(event.type)
        if event.type == "response.output_text.delta":
            arrivals.append(time.monotonic_ns())
            deltas.append(event.delta)
        elif event.type == "response.completed":
            assert event.response.output_text == TEXT
            assert event.response.usage is not None
            assert event.response.usage.output_tokens == len(TEXTS)
    assert "".join(deltas) == TEXT
    assert deltas == TEXTS
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    truth = _truth(replay, "rd-1")
    assert truth.endpoint == "responses"
    assert truth.finish_reason == "stop"
    _check_timing(truth, arrivals)


def test_a_whole_response_carries_the_recorded_text(
    replay: ReplayServer, oai: openai.OpenAI
) -> None:
    response = oai.responses.create(model="any", input="hi", extra_headers={"X-Request-Id": "rd-2"})
    assert response.output_text == TEXT
    assert response.status == "completed"
    assert _truth(replay, "rd-2").endpoint == "responses"


# -- Anthropic Messages -----------------------------------------------------------------------


@pytest.mark.serial  # gaps to 100 ms of the recording's: run alone (make test)
def test_the_anthropic_sdk_reads_the_recorded_text_with_its_gaps(
    replay: ReplayServer, claude: anthropic.Anthropic
) -> None:
    arrivals: list[int] = []
    pieces: list[str] = []
    with claude.messages.stream(
        model="any", max_tokens=64, messages=HI, extra_headers={"X-Request-Id": "rd-3"}
    ) as stream:
        for text in stream.text_stream:
            arrivals.append(time.monotonic_ns())
            pieces.append(text)
        final = stream.get_final_message()
    assert "".join(pieces) == TEXT
    assert pieces == TEXTS
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == len(TEXTS)
    truth = _truth(replay, "rd-3")
    assert truth.endpoint == "messages"
    assert truth.finish_reason == "stop"
    _check_timing(truth, arrivals)


def test_a_whole_message_carries_the_recorded_text(
    replay: ReplayServer, claude: anthropic.Anthropic
) -> None:
    message = claude.messages.create(
        model="any", max_tokens=64, messages=HI, extra_headers={"X-Request-Id": "rd-4"}
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == TEXT
    assert _truth(replay, "rd-4").endpoint == "messages"


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "field"),
    [
        ("/v1/responses", {"model": "m"}, {}, 400, "input"),
        (
            "/v1/responses",
            {"model": "m", "input": "hi", "max_output_tokens": 0},
            {},
            400,
            "max_output_tokens",
        ),
        (
            "/v1/responses",
            {"model": "m", "input": "hi"},
            {"X-Replay-Stream": "nope"},
            404,
            "X-Replay-Stream",
        ),
        ("/v1/messages", {"model": "m", "messages": HI}, {}, 400, "max_tokens"),
        ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": []}, {}, 400, "messages"),
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": HI},
            {"X-Replay-Stream": "nope"},
            404,
            "X-Replay-Stream",
        ),
    ],
)
def test_bad_requests_are_refused_in_the_apis_shape_naming_the_field(
    replay: ReplayServer,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    status: int,
    field: str,
) -> None:
    with httpx2.Client(timeout=15) as client:
        response = client.post(f"{replay.url}{path}", json=body, headers=headers)
    assert response.status_code == status
    answer = response.json()
    if path == "/v1/responses":
        assert set(answer["error"]) == {"message", "type", "param", "code"}
        assert answer["error"]["param"] == field
    else:
        assert answer["type"] == "error"
        expected = {400: "invalid_request_error", 404: "not_found_error"}
        assert answer["error"]["type"] == expected[status]
        assert answer["error"]["message"].startswith(f"{field}: ")


def test_the_sdks_raise_their_own_errors_for_refusals(
    oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        claude.messages.create(model="any", max_tokens=0, messages=HI)
    with pytest.raises(openai.BadRequestError, match="input"):
        oai.responses.create(model="any", input=[])
