"""The Responses and Messages wires, written by the lab's writer in simulated time: every event
checked against the official SDKs' types, the ground truth of each, and the faults the writer
makes (a silent finish, an error before any token, an echoed key, an oversized event)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import anthropic.types
import openai.types.responses
import orjson
import pytest
from pydantic import BaseModel

from steadystream._types import EventKind
from steadystream.lab.truth import RequestTruth
from steadystream.lab.wire import Wire
from steadystream.lab.wire_messages import MessagesFormat
from steadystream.lab.wire_responses import ResponsesFormat
from tests.support.lab import scenario
from tests.support.lab_wire import S, Written, named_events, respond

QUICK = scenario(
    "steady",
    scheduler={"step_base_ms": 10.0},
    output={"min_tokens": 30, "max_tokens": 30},
)
KEY = "sk-ant-lab-echo-0123456789"


def _types(union: Any) -> dict[str, type[BaseModel]]:
    """An SDK's discriminated union of events, by their ``type``."""
    members = get_args(get_args(union)[0])
    return {get_args(m.model_fields["type"].annotation)[0]: m for m in members}


RESPONSES_EVENTS = _types(openai.types.responses.ResponseStreamEvent)
MESSAGES_EVENTS = {
    **_types(anthropic.types.RawMessageStreamEvent),
    "error": anthropic.types.ErrorResponse,
}


def responses_wire(truth: RequestTruth) -> Wire:
    return ResponsesFormat(response_id="resp_w-1", item_id="msg_w-1", model="lab", created=0)


def messages_wire(truth: RequestTruth) -> Wire:
    return MessagesFormat(message_id="msg_w-1", model="lab", input_tokens=truth.prompt_tokens)


async def _respond(wire: Callable[[RequestTruth], Wire], faults: str = "", **kw: Any) -> Written:
    name = "x-api-key" if wire is messages_wire else "Authorization"
    return await respond(QUICK, wire, faults, authorization=KEY, credential_name=name, **kw)


def _responses(written: Written) -> list[tuple[str, dict[str, Any]]]:
    """The events, each checked: its data's type is its name, its shape the SDK's, and the
    sequence numbers count from 0 by one."""
    events = named_events(written.raw)
    for name, data in events:
        assert data["type"] == name
        RESPONSES_EVENTS[name].model_validate(data)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    return events


def _messages(written: Written) -> list[tuple[str, dict[str, Any]]]:
    events = named_events(written.raw)
    for name, data in events:
        assert data["type"] == name
        if name != "ping":
            MESSAGES_EVENTS[name].model_validate(data)
    return events


def _kinds(truth: RequestTruth) -> list[str]:
    return [EventKind(kind).name.lower() for kind in truth.kinds]


@pytest.mark.parametrize(("limit", "status"), [(None, "completed"), (12, "incomplete")])
@pytest.mark.asyncio
async def test_a_responses_stream_has_the_sdk_shapes_and_its_truth(
    limit: int | None, status: str
) -> None:
    written = await _respond(responses_wire, max_tokens=limit)
    events = _responses(written)
    names = [name for name, _ in events]
    deltas = [data["delta"] for name, data in events if name == "response.output_text.delta"]
    tokens = 30 if limit is None else limit
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * tokens,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        f"response.{status}",
    ]
    truth = written.truth
    text = "".join(truth.texts)
    assert "".join(deltas) == text
    assert events[-4][1]["text"] == text
    final = events[-1][1]["response"]
    assert final["status"] == status
    assert final["output"][0]["content"][0]["text"] == text
    assert final["usage"]["input_tokens"] == truth.prompt_tokens
    assert final["usage"]["output_tokens"] == tokens
    expected = None if limit is None else {"reason": "max_output_tokens"}
    assert final["incomplete_details"] == expected
    # The truth: the opening as it is decoded (created starts the answer, the rest is
    # structural), one content event per delta with its bytes; the terminal is the end.
    assert _kinds(truth) == ["role", *["keepalive"] * 3, *["content"] * tokens, *["keepalive"] * 3]
    content_bytes = [b for b, k in zip(truth.wire_bytes, truth.kinds, strict=True) if k == 1]
    raw_deltas = [e for e in written.events() if e.startswith(b"event: response.output_text.d")]
    assert content_bytes == [len(e) + 2 for e in raw_deltas[:-1]]
    assert truth.outcome.value == "complete"


@pytest.mark.parametrize(("limit", "reason"), [(None, "end_turn"), (12, "max_tokens")])
@pytest.mark.asyncio
async def test_a_messages_stream_has_the_sdk_shapes_and_its_truth(
    limit: int | None, reason: str
) -> None:
    written = await _respond(messages_wire, max_tokens=limit)
    events = _messages(written)
    tokens = 30 if limit is None else limit
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * tokens,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    truth = written.truth
    deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert "".join(deltas) == "".join(truth.texts)
    assert events[0][1]["message"]["usage"] == {
        "input_tokens": truth.prompt_tokens,
        "output_tokens": 1,
    }
    assert events[-2][1]["delta"] == {"stop_reason": reason, "stop_sequence": None}
    assert events[-2][1]["usage"] == {"output_tokens": tokens}
    assert _kinds(truth) == [
        "role",
        "keepalive",
        "keepalive",
        *["content"] * tokens,
        "keepalive",
        "empty",
    ]
    assert truth.outcome.value == "complete"


@pytest.mark.asyncio
async def test_whole_answers_have_the_sdk_shapes() -> None:
    written = await _respond(responses_wire, max_tokens=5, stream=False)
    response = openai.types.responses.Response.model_validate(orjson.loads(written.raw))
    assert response.output_text == "".join(written.truth.texts)
    assert response.status == "incomplete"
    written = await _respond(messages_wire, max_tokens=None, stream=False)
    message = anthropic.types.Message.model_validate(orjson.loads(written.raw))
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 30
    assert isinstance(message.content[0], anthropic.types.TextBlock)
    assert message.content[0].text == "".join(written.truth.texts)


@pytest.mark.asyncio
async def test_an_error_after_tokens_ends_each_dialect_its_own_way() -> None:
    written = await _respond(responses_wire, "error-after=3")
    events = _responses(written)
    assert [name for name, _ in events][-3:] == [
        "response.output_text.delta",
        "error",
        "response.failed",
    ]
    assert events[-2][1]["message"] == "lab fault: error-after"
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "lab fault: error-after"}
    assert _kinds(written.truth)[-2:] == ["content", "error"]
    assert written.truth.outcome.value == "error"
    written = await _respond(messages_wire, "error-after=3")
    events = _messages(written)
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "lab fault: error-after"},
        },
    )
    assert _kinds(written.truth)[-2:] == ["content", "error"]


@pytest.mark.parametrize("wire", [responses_wire, messages_wire])
@pytest.mark.asyncio
async def test_an_error_before_any_token_still_opens_the_stream(
    wire: Callable[[RequestTruth], Wire],
) -> None:
    written = await _respond(wire, "error-after=0")
    events = _responses(written) if wire is responses_wire else _messages(written)
    first = "response.created" if wire is responses_wire else "message_start"
    assert events[0][0] == first
    assert "error" in [name for name, _ in events]
    assert _kinds(written.truth)[0] == "role"
    assert written.truth.tokens_written == 0


@pytest.mark.parametrize(
    ("wire", "before", "after"),
    [
        (responses_wire, b"response.output_item.done", b"response.completed"),
        (messages_wire, b"message_delta", b"message_stop"),
    ],
)
@pytest.mark.asyncio
async def test_a_silent_finish_holds_the_terminal_event_back(
    wire: Callable[[RequestTruth], Wire], before: bytes, after: bytes
) -> None:
    written = await _respond(wire, "silent-finish=3s", max_tokens=None)
    assert written.written_at(after) - written.written_at(before) == 3 * S
    assert written.closed_at == written.written_at(after)
    # The terminal event is the end, not a timeline event: the silence is the end's.
    assert written.truth.end_extra_ns == {"injected-fault": 3 * S}
    assert written.truth.outcome.value == "complete"


@pytest.mark.parametrize("wire", [responses_wire, messages_wire])
@pytest.mark.asyncio
async def test_echo_auth_breaks_a_delta_around_the_key(
    wire: Callable[[RequestTruth], Wire],
) -> None:
    written = await _respond(wire, "echo-auth=2:malformed")
    broken = written.events()[-1]
    assert KEY.encode() in broken
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(broken.partition(b"data: ")[2])
    assert KEY not in orjson.dumps(written.truth.to_json()).decode()
    name = b"x-api-key" if wire is messages_wire else b"Authorization"
    whole = await _respond(wire, "echo-auth=1", stream=False)
    assert whole.status == (529 if wire is messages_wire else 500)
    assert name + b": " + KEY.encode() in whole.raw


@pytest.mark.parametrize("wire", [responses_wire, messages_wire])
@pytest.mark.asyncio
async def test_oversize_writes_one_event_of_exactly_the_asked_size(
    wire: Callable[[RequestTruth], Wire],
) -> None:
    written = await _respond(wire, "oversize-after=4:256KiB")
    # (The Responses API repeats the whole text in its closing events: those are big too.)
    delta = (b"event: response.output_text.delta", b"event: content_block_delta")
    sizes = [len(event) + 2 for event in written.events() if event.startswith(delta)]
    assert [size for size in sizes if size > 10_000] == [256 * 1024]
    truth = written.truth
    assert (
        max(b for b, k in zip(truth.wire_bytes, truth.kinds, strict=True) if k == 1) == 256 * 1024
    )
    (_responses if wire is responses_wire else _messages)(written)  # still well formed
