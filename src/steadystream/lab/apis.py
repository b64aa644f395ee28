"""The APIs the lab serves: for each, its path, its request body, its wire and its errors.

- ``chat`` (``/v1/chat/completions``) and ``completions`` (``/v1/completions``):
  :class:`~steadystream.lab.wire.SseFormat`, shaped like vLLM's; OpenAI's error shape;
- ``responses`` (``/v1/responses``): :class:`~steadystream.lab.wire_responses.
  ResponsesFormat`, OpenAI's Responses API; OpenAI's error shape;
- ``messages`` (``/v1/messages``): :class:`~steadystream.lab.wire_messages.MessagesFormat`,
  Anthropic's Messages API; Anthropic's error shape.

The API's name is the ground truth's ``endpoint``. Everything else about a request (the
engine, faults, cancellation, the truth) is the same whatever API it came through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from starlette.responses import Response

from steadystream._api_errors import ApiError
from steadystream.lab.api import ChatRequest, CompletionRequest, MessagesRequest, ResponsesRequest
from steadystream.lab.wire import SseFormat, Wire
from steadystream.lab.wire_messages import MessagesFormat, refusal
from steadystream.lab.wire_responses import ResponsesFormat

__all__ = ["APIS", "LabApi", "WireContext"]

_B = TypeVar("_B")


@dataclass(frozen=True, slots=True)
class WireContext:
    """What a wire needs to know of its request besides the body."""

    request_id: str
    created: int  # unix seconds
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class LabApi(Generic[_B]):
    """One API the lab serves."""

    name: str  # the ground truth's endpoint: chat, completions, responses, messages
    path: str
    body: type[_B]
    prompt_field: str  # named when the prompt does not fit in the KV cache
    wire: Callable[[_B, WireContext], Wire]
    refuse: Callable[[ApiError, dict[str, str] | None], Response]
    credential_headers: tuple[str, ...] = ("Authorization",)  # the echo-auth fault's, in order


def _openai_refusal(error: ApiError, headers: dict[str, str] | None) -> Response:
    return error.response(headers)


def _chat_wire(body: ChatRequest, at: WireContext) -> Wire:
    return SseFormat(
        chat=True,
        completion_id=f"chatcmpl-{at.request_id}",
        model=body.model,
        created=at.created,
        include_usage=body.include_usage,
    )


def _completions_wire(body: CompletionRequest, at: WireContext) -> Wire:
    return SseFormat(
        chat=False,
        completion_id=f"cmpl-{at.request_id}",
        model=body.model,
        created=at.created,
        include_usage=body.include_usage,
    )


def _responses_wire(body: ResponsesRequest, at: WireContext) -> Wire:
    settings = {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "reasoning": body.reasoning,
        "temperature": body.temperature,
        "top_p": body.top_p,
    }
    return ResponsesFormat(
        response_id=f"resp_{at.request_id}",
        item_id=f"msg_{at.request_id}",
        model=body.model,
        created=at.created,
        settings=settings,
    )


def _messages_wire(body: MessagesRequest, at: WireContext) -> Wire:
    return MessagesFormat(
        message_id=f"msg_{at.request_id}", model=body.model, input_tokens=at.prompt_tokens
    )


APIS: tuple[LabApi[Any], ...] = (
    LabApi(
        name="chat",
        path="/v1/chat/completions",
        body=ChatRequest,
        prompt_field="messages",
        wire=_chat_wire,
        refuse=_openai_refusal,
    ),
    LabApi(
        name="completions",
        path="/v1/completions",
        body=CompletionRequest,
        prompt_field="prompt",
        wire=_completions_wire,
        refuse=_openai_refusal,
    ),
    LabApi(
        name="responses",
        path="/v1/responses",
        body=ResponsesRequest,
        prompt_field="input",
        wire=_responses_wire,
        refuse=_openai_refusal,
    ),
    LabApi(
        name="messages",
        path="/v1/messages",
        body=MessagesRequest,
        prompt_field="messages",
        wire=_messages_wire,
        refuse=refusal,
        credential_headers=("x-api-key", "Authorization"),  # where Anthropic clients put it
    ),
)
"""Every API the lab serves, in the order its routes are listed."""
