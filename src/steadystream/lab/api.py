"""The request bodies the lab accepts: chat, completions, the Responses API and Messages.

Validation is pydantic's; its errors are mapped at this boundary to one :class:`ApiError`
naming the offending field, which each API answers in its own shape (OpenAI's
``{"error": {"message", "type", "param", "code"}}``, or Anthropic's), so clients and SDKs
see what they would see from a real server. Every body gives the scheduler the same few
things (:class:`LabBody`): the model, whether to stream, a token limit and a prompt size.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from steadystream._api_errors import ApiError, error_response
from steadystream.timeline import estimate_tokens

__all__ = [
    "ApiError",
    "ChatRequest",
    "CompletionRequest",
    "LabBody",
    "MessagesRequest",
    "ResponsesRequest",
    "error_response",
    "parse_body",
]


class LabBody(Protocol):
    """What the lab reads from any request body, whatever its API."""

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool: ...

    @property
    def ignore_eos(self) -> bool: ...

    @property
    def token_limit(self) -> int | None: ...

    def prompt_tokens(self, overhead: int) -> int: ...


class _Body(BaseModel):
    # Unknown fields are accepted and ignored, as OpenAI-compatible servers do.
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    include_usage: bool = False


class ContentPart(_Body):
    type: str
    text: str | None = None


class Message(_Body):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(part.text or "" for part in self.content)
        return self.content or ""


class _Request(_Body):
    model: str
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    ignore_eos: bool = False  # vLLM's extension: generate exactly the token limit


class _Generation(_Request):
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    n: int = 1

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("the lab serves n = 1 only")
        return value

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatRequest(_Generation):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens else self.max_tokens

    def prompt_tokens(self, overhead: int) -> int:
        # Each message costs a few template tokens (role markers) besides its text.
        return overhead + sum(4 + estimate_tokens(m.text()) for m in self.messages)


class CompletionRequest(_Generation):
    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("the lab serves one prompt per request")
        return value

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    def prompt_tokens(self, overhead: int) -> int:
        text = self.prompt if isinstance(self.prompt, str) else self.prompt[0]
        return max(1, estimate_tokens(text))


def _listed(what: str, wrap: str) -> BeforeValidator:
    """A field that is a string or a list: a string becomes one ``{"type": wrap, "text"}``."""

    def before(value: Any) -> Any:
        if isinstance(value, str):
            return [{"type": wrap, "text": value}]
        if isinstance(value, list):
            return value
        raise ValueError(f"must be a string or a list of {what}")

    return BeforeValidator(before)


def _text_of(blocks: list[ContentPart] | None) -> str:
    return " ".join(block.text or "" for block in blocks or ())


# -- the Responses API ------------------------------------------------------------------------

InputContent = Annotated[list[ContentPart], _listed("content parts", "input_text")]


class InputItem(_Body):
    """One item of a Responses ``input``: a message (others are counted by their text)."""

    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: InputContent | None = None

    def text(self) -> str:
        return _text_of(self.content)


def _input_items(value: Any) -> Any:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return value
    raise ValueError("must be a string or a list of input items")


class ResponsesRequest(_Request):
    """``POST /v1/responses``. ``reasoning`` is accepted and repeated; the lab makes none."""

    input: Annotated[list[InputItem], BeforeValidator(_input_items)] = Field(min_length=1)
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    reasoning: dict[str, Any] | None = None

    @property
    def token_limit(self) -> int | None:
        return self.max_output_tokens

    def prompt_tokens(self, overhead: int) -> int:
        system = 4 + estimate_tokens(self.instructions) if self.instructions else 0
        return overhead + system + sum(4 + estimate_tokens(item.text()) for item in self.input)


# -- Anthropic Messages -----------------------------------------------------------------------

Blocks = Annotated[list[ContentPart], _listed("content blocks", "text")]


class AnthropicMessage(_Body):
    role: Literal["user", "assistant"]
    content: Blocks


class MessagesRequest(_Request):
    """``POST /v1/messages``: ``max_tokens`` is required, as Anthropic's API has it."""

    messages: list[AnthropicMessage] = Field(min_length=1)
    system: Blocks | None = None
    max_tokens: int = Field(ge=1)
    temperature: float | None = Field(None, ge=0, le=1)

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    def prompt_tokens(self, overhead: int) -> int:
        system = 4 + estimate_tokens(_text_of(self.system)) if self.system else 0
        turns = sum(4 + estimate_tokens(_text_of(m.content)) for m in self.messages)
        return overhead + system + turns


def parse_body(raw: bytes, model: type[_Request]) -> Any:
    """Parse and validate a JSON body; raise :class:`ApiError` (400) naming the field."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [(_field_path(error["loc"]), error["msg"]) for error in exc.errors()]
        first = errors[0][0]
        # A value that fits none of a union's members has one error per member; the deepest
        # is about what was sent (a list's wrong item), not "should be a valid string".
        path, why = max((e for e in errors if e[0][: len(first)] == first), key=lambda e: len(e[0]))
        param = ".".join(str(part) for part in path) or None
        message = f"{param}: {why}" if param else why
        raise ApiError(400, message, param=param) from exc


_UNION_MEMBERS = frozenset({"str", "int", "float", "bool"})


def _field_path(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """pydantic's location of an error less the union members it names (``str``,
    ``list[ContentPart]``): those are no field of the body (no field here has such a name)."""
    return tuple(
        part
        for part in loc
        if not (isinstance(part, str) and (part in _UNION_MEMBERS or "[" in part))
    )
