"""The OpenAI-compatible request bodies the lab accepts, and its errors in OpenAI's shape.

Validation is pydantic's; its errors are mapped at this boundary to one OpenAI-style error
(``{"error": {"message", "type", "param", "code"}}``) naming the offending field, so clients
and SDKs see what they would see from a real server.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from steadystream._api_errors import ApiError, error_response
from steadystream.timeline import estimate_tokens

__all__ = [
    "ApiError",
    "ChatRequest",
    "CompletionRequest",
    "error_response",
    "parse_body",
]


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


class _Generation(_Body):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = 1
    ignore_eos: bool = False  # vLLM's extension: generate exactly max_tokens

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


def parse_body(raw: bytes, model: type[_Generation]) -> Any:
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
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        message = f"{param}: {first['msg']}" if param else first["msg"]
        raise ApiError(400, message, param=param) from exc
