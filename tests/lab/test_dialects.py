"""The lab's Responses API and Anthropic Messages routes over real loopback sockets, read by
the official ``openai`` and ``anthropic`` SDKs: text and usage against the ground truth,
sequence numbers, errors as each SDK raises them, disconnects, and refused requests."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import orjson
import pytest

from steadystream.lab import LabServer
from tests.support.lab import MS, scenario

pytestmark = pytest.mark.integration

FAST = scenario(
    "steady",
    scheduler={"step_base_ms": 5.0},
    output={"min_tokens": 20, "max_tokens": 40},
    kv_cache={"total_blocks": 1024},
)
STEP_MS = 5.0 + 0.02
HI = [{"role": "user", "content": "Tell me about pauses."}]
LONG = {"ignore_eos": True}  # with a token limit of 200: far longer than the test reads


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer(FAST, seed=1) as server:
        yield server


@pytest.fixture(scope="module")
def oai(lab: LabServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=lab.base_url, api_key="lab", max_retries=0, timeout=15) as client:
        yield client


@pytest.fixture(scope="module")
def claude(lab: LabServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=lab.url, api_key="lab", max_retries=0, timeout=15) as client:
        yield client


def _id(request_id: str, fault: str | None = None) -> dict[str, str]:
    headers = {"X-Request-Id": request_id}
    if fault is not None:
        headers["X-Lab-Fault"] = fault
    return headers


def _truth(lab: LabServer, request_id: str) -> Any:
    """The ground truth once the request is done (polls briefly)."""
    deadline = time.monotonic() + 10
    while True:
        truth = lab.truth(request_id)
        if truth is not None and truth.done:
            return truth
        assert time.monotonic() < deadline, f"{request_id} did not finish"
        time.sleep(0.02)


# -- the Responses API ------------------------------------------------------------------------


def test_responses_events_from_the_sdk_match_the_truth(lab: LabServer, oai: openai.OpenAI) -> None:
    stream = oai.responses.create(
        model="lab", input="hello", stream=True, extra_headers=_id("rs-1")
    )
    events = list(stream)
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(numbers)))  # from 0, by one: every event was kept
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    (completed,) = [e for e in events if e.type == "response.completed"]
    truth = _truth(lab, "rs-1")
    assert text == "".join(truth.texts)
    assert completed.response.output_text == text
    usage = completed.response.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (truth.prompt_tokens, truth.tokens_written)
    assert usage.total_tokens == truth.prompt_tokens + truth.tokens_written
    assert truth.endpoint == "responses"
    timeline = lab.timeline("rs-1")
    assert timeline is not None
    assert timeline.labels["endpoint"] == "responses"
    assert timeline.total_tokens == truth.tokens_written


def test_responses_stream_helper_and_whole_answers(lab: LabServer, oai: openai.OpenAI) -> None:
    with oai.responses.stream(
        model="lab",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        instructions="Be brief.",
        extra_headers=_id("rs-2"),
    ) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "".join(_truth(lab, "rs-2").texts)
    assert final.status == "completed"
    assert final.instructions == "Be brief."
    whole = oai.responses.create(
        model="lab", input="x", max_output_tokens=16, extra_headers=_id("rs-3")
    )
    assert whole.status == "incomplete"
    assert whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage is not None
    assert whole.usage.output_tokens == 16
    assert whole.output_text == "".join(_truth(lab, "rs-3").texts)


def test_a_responses_error_fault_is_an_error_event_then_failed(
    lab: LabServer, oai: openai.OpenAI
) -> None:
    with oai.responses.stream(
        model="lab", input="hi", extra_headers=_id("rs-err", "error-after=3")
    ) as stream:
        events = list(stream)
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    error, failed = events[-2:]
    assert error.type == "error"
    assert error.message == "lab fault: error-after"
    assert failed.type == "response.failed"
    assert failed.response.error is not None
    assert failed.response.error.code == "server_error"
    assert sum(e.type == "response.output_text.delta" for e in events) == 3
    assert _truth(lab, "rs-err").outcome.value == "error"
    with pytest.raises(openai.InternalServerError, match="error-after"):
        oai.responses.create(model="lab", input="hi", extra_headers=_id("rs-err2", "error-after=2"))


# -- Anthropic Messages -----------------------------------------------------------------------


def test_messages_stream_helper_matches_the_truth(
    lab: LabServer, claude: anthropic.Anthropic
) -> None:
    with claude.messages.stream(
        model="lab", max_tokens=100, system="Be brief.", messages=HI, extra_headers=_id("ms-1")
    ) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    truth = _truth(lab, "ms-1")
    assert text == "".join(truth.texts)
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == truth.prompt_tokens
    assert message.usage.output_tokens == truth.tokens_written
    assert truth.endpoint == "messages"
    whole = claude.messages.create(
        model="lab", max_tokens=7, messages=HI, extra_headers=_id("ms-2")
    )
    assert whole.stop_reason == "max_tokens"
    assert whole.usage.output_tokens == 7
    block = whole.content[0]
    assert isinstance(block, anthropic.types.TextBlock)
    assert block.text == "".join(_truth(lab, "ms-2").texts)


def test_a_messages_error_fault_is_raised_by_the_sdk(
    lab: LabServer, claude: anthropic.Anthropic
) -> None:
    pieces: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        claude.messages.stream(
            model="lab", max_tokens=100, messages=HI, extra_headers=_id("ms-err", "error-after=3")
        ) as stream,
    ):
        pieces.extend(stream.text_stream)
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"]["type"] == "overloaded_error"
    assert len(pieces) == 3
    assert _truth(lab, "ms-err").outcome.value == "error"
    with pytest.raises(anthropic.OverloadedError):
        claude.messages.create(
            model="lab", max_tokens=50, messages=HI, extra_headers=_id("ms-e2", "error-after=2")
        )


# -- both: resets, disconnects, refusals ------------------------------------------------------


def test_a_reset_is_a_connection_error_in_both_sdks(
    lab: LabServer, oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    with pytest.raises(openai.APIConnectionError):
        for _ in oai.responses.create(
            model="lab", input="hi", stream=True, extra_headers=_id("rs-rst", "reset-after=4")
        ):
            pass
    # The anthropic SDK lets a transport error mid-stream through as httpx's own.
    with (
        pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)),
        claude.messages.stream(
            model="lab", max_tokens=90, messages=HI, extra_headers=_id("ms-rst", "reset-after=4")
        ) as stream,
    ):
        stream.until_done()
    for request_id in ("rs-rst", "ms-rst"):
        truth = _truth(lab, request_id)
        assert truth.outcome.value == "truncated"
        assert truth.tokens_written == 4


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_client_that_leaves_mid_stream_frees_the_sequence(
    lab: LabServer, oai: openai.OpenAI, claude: anthropic.Anthropic, api: str
) -> None:
    request_id = f"gone-{api}"
    if api == "responses":
        stream = oai.responses.create(
            model="lab",
            input="hi",
            stream=True,
            max_output_tokens=200,
            extra_body=LONG,
            extra_headers=_id(request_id),
        )
        deltas = 0
        for event in stream:
            deltas += event.type == "response.output_text.delta"
            if deltas == 10:
                break
        stream.close()  # drop the connection mid-stream
    else:
        with claude.messages.stream(
            model="lab", max_tokens=200, messages=HI, extra_body=LONG, extra_headers=_id(request_id)
        ) as gone:
            for n, _ in enumerate(gone.text_stream, 1):
                if n == 10:
                    break
    truth = _truth(lab, request_id).to_json()
    assert truth["outcome"] == "cancelled"
    assert truth["endpoint"] == api
    assert truth["disconnect_noticed_ns"] is not None
    assert truth["kv_freed_step_ns"] - truth["disconnect_noticed_ns"] <= STEP_MS * MS
    assert truth["tokens_after_disconnect"] <= 1
    assert truth["tokens_written"] < 200
    assert lab.engine.num_running == 0


RESPONSES = {"model": "lab", "input": "hi"}
MESSAGES = {"model": "lab", "max_tokens": 10, "messages": HI}


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "field"),
    [
        ("/responses", {"model": "lab"}, {}, 400, "input"),
        ("/responses", {**RESPONSES, "input": 5}, {}, 400, "input"),
        ("/responses", {**RESPONSES, "input": [{"role": "x"}]}, {}, 400, "input.0.role"),
        ("/responses", {**RESPONSES, "max_output_tokens": 0}, {}, 400, "max_output_tokens"),
        ("/responses", {**RESPONSES, "input": "word " * 40_000}, {}, 400, "input"),
        ("/responses", {**RESPONSES, "model": "gpt-9"}, {}, 404, "model"),
        ("/responses", RESPONSES, {"X-Lab-Fault": "explode=1"}, 400, "X-Lab-Fault"),
        ("/responses", {**RESPONSES, "input": "x" * 2_000_000}, {}, 413, None),
        ("/messages", {"model": "lab", "messages": HI}, {}, 400, "max_tokens"),
        ("/messages", {**MESSAGES, "max_tokens": 0}, {}, 400, "max_tokens"),
        (
            "/messages",
            {**MESSAGES, "messages": [{"role": "system", "content": "x"}]},
            {},
            400,
            "messages.0.role",
        ),
        ("/messages", {**MESSAGES, "temperature": 1.5}, {}, 400, "temperature"),
        ("/messages", {**MESSAGES, "system": "word " * 40_000}, {}, 400, "messages"),
        ("/messages", {**MESSAGES, "model": "claude-9"}, {}, 404, "model"),
        ("/messages", MESSAGES, {"X-Lab-Fault": "explode=1"}, 400, "X-Lab-Fault"),
        ("/messages", b"{not json", {}, 400, None),
        ("/messages", {**MESSAGES, "system": "x" * 2_000_000}, {}, 413, None),
    ],
)
@pytest.mark.asyncio
async def test_bad_requests_are_refused_in_the_dialects_shape_naming_the_field(
    lab: LabServer,
    path: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    field: str | None,
) -> None:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    data = io.BytesIO(raw) if len(raw) > 512 * 1024 else raw  # aiohttp warns on big bytes
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session,
        session.post(f"{lab.base_url}{path}", data=data, headers=headers) as response,
    ):
        assert response.status == status
        answer = orjson.loads(await response.read())
    if path == "/responses":
        error = answer["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["param"] == field
    else:
        assert answer["type"] == "error"
        assert set(answer["error"]) == {"type", "message"}
        expected = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large"}
        assert answer["error"]["type"] == expected[status]
        if field is not None:
            assert answer["error"]["message"].startswith(f"{field}: ")


def test_the_anthropic_sdk_raises_its_own_errors_for_refusals(
    claude: anthropic.Anthropic,
) -> None:
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        claude.messages.create(model="lab", max_tokens=0, messages=HI)
    with pytest.raises(anthropic.NotFoundError, match="claude-9"):
        claude.messages.create(model="claude-9", max_tokens=5, messages=HI)
