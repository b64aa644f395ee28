"""What a client asked for: the request body read and checked field by field, and the shape
its errors take.

The body is read within ``limits.max_body_bytes`` (413) and ``server.body_timeout`` (408), and
kept as the client sent it (unknown fields go upstream untouched, as providers add them all
the time); only the fields the gateway acts on are checked, and a bad one gets a 400 whose
``param`` names it, as OpenAI's own API does. Errors on the Messages API's paths are in
Anthropic's shape, with the field at the start of the message (:func:`error_shape`).

Two bounds keep what goes upstream something every upstream reads as the client meant it:
a body nests at most :data:`MAX_DEPTH` arrays and objects (orjson reads 1024 levels but
writes only 254: a deeper body could not be sent on at all), and a count (``n``, the token
limits) is at most :data:`MOST_COUNT`, as engines with 32-bit fields read it (llama.cpp
would read ``max_tokens: 4294967295`` as -1, no limit at all).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeGuard

import orjson
from starlette.requests import Request

from steadystream._api_errors import ApiError, ErrorShape, error_response, is_client_id, read_body
from steadystream.gateway.config import GatewayConfig

__all__ = [
    "MAX_DEPTH",
    "MOST_COUNT",
    "TYPED_ROUTES",
    "ApiError",
    "ProxyRequest",
    "Route",
    "error_response",
    "error_shape",
    "model_not_served",
    "new_request_id",
    "parse_model_body",
    "parse_request",
    "read_request_body",
    "request_id_of",
]

Route: TypeAlias = Literal["chat", "completions", "responses", "messages"]
TYPED_ROUTES = ("responses", "messages")
"""The routes whose streams are typed events (the OpenAI Responses and Anthropic Messages
APIs): relayed as they come, failed over only while the client has had nothing of them."""

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
MAX_DEPTH = 128
"""The most arrays and objects a request body may nest (far past any real request; orjson
writes no more than 254, and a translation nests a request's parts a level or two deeper)."""
MOST_COUNT = 2**31 - 1
"""The largest ``n`` or token limit taken: what a signed 32-bit field holds."""


def new_request_id() -> str:
    return f"gw-{uuid.uuid4().hex}"


def request_id_of(request: Request, hide_keys: Callable[[str], str] = str) -> str:
    """The client's ``X-Request-Id`` when it may be used as given (:func:`is_client_id`),
    else a new one. ``hide_keys`` is the gateway's key scrubber
    (:meth:`~steadystream.gateway.upstreams.UpstreamPool.redact`): an id that holds a key
    (a client that sent its key in the wrong header) is not used either, as the id goes
    into every log line, record and upstream request of the stream."""
    given = request.headers.get("x-request-id")
    if given and is_client_id(given) and hide_keys(given) == given:
        return given
    return new_request_id()


def error_shape(path: str) -> ErrorShape:
    """The error shape a path's clients read: Anthropic's on the Messages API
    (``/v1/messages`` and the paths under it), OpenAI's elsewhere. ``path`` may leave out
    the ``/v1`` (an API path under the base URL, ``/messages``)."""
    api = path.removeprefix("/v1")
    return "anthropic" if api == "/messages" or api.startswith("/messages/") else "openai"


async def read_request_body(request: Request, config: GatewayConfig) -> bytes:
    """The body, at most ``limits.max_body_bytes`` (413), within ``server.body_timeout``
    (408: a body that trickles in holds a connection)."""
    try:
        async with asyncio.timeout(config.server.body_timeout / 1e9):
            return await read_body(request, config.limits.max_body_bytes)
    except TimeoutError as exc:
        raise ApiError(
            408, "the request body did not arrive in time (server.body_timeout)", code="timeout"
        ) from exc


def model_not_served(model: str, served: list[str]) -> ApiError:
    """The 404 of a model no upstream serves, naming those that are."""
    listed = ", ".join(served) or "none listed"
    return ApiError(
        404,
        f"model: {model!r} is not served by any upstream (served: {listed})",
        param="model",
        code="model_not_found",
    )


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """A checked client request."""

    route: Route
    body: dict[str, Any]
    model: str
    stream: bool
    choices: int = 1

    @property
    def chat(self) -> bool:
        return self.route == "chat"

    @property
    def typed(self) -> bool:
        """A Responses or Messages request (TYPED_ROUTES)."""
        return self.route in TYPED_ROUTES

    @property
    def max_tokens(self) -> int | None:
        body = self.body
        if self.route == "responses":
            limit = body.get("max_output_tokens")
            return limit if _is_int(limit) else None
        limit = body.get("max_completion_tokens") if self.chat else None
        return limit if limit is not None else body.get("max_tokens")

    @property
    def prompt_is_text(self) -> bool:
        """A completion prompt that text can be appended to (one string)."""
        prompt = self.body.get("prompt")
        return isinstance(prompt, str) or (
            isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str)
        )


def parse_model_body(raw: bytes) -> tuple[dict[str, Any], str]:
    """A JSON object naming its ``model`` (what every routed request is), and the model;
    :class:`ApiError` (400) otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    if _too_deep(raw, body):
        raise ApiError(400, f"the body nests more than {MAX_DEPTH} arrays and objects")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model: required, a non-empty string", param="model")
    return body, model


def parse_request(raw: bytes, route: Route) -> ProxyRequest:
    """Parse and check a request body; :class:`ApiError` (400) names the offending field."""
    body, model = parse_model_body(raw)
    if route == "chat":
        _check_messages(body.get("messages"))
    elif route == "completions":
        _check_prompt(body.get("prompt"))
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(400, "stream: must be true or false", param="stream")
    if route == "responses":
        _check_responses(body)
        return ProxyRequest(route, body, model, stream)
    if route == "messages":
        _check_anthropic_messages(body)
        return ProxyRequest(route, body, model, stream)
    n = body.get("n", 1)
    if n is None:
        n = 1
    _check_count("n", n)
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None:
            _check_count(name, value)
    _check_number(body, "temperature", 0.0, 2.0, low_open=False)
    _check_number(body, "top_p", 0.0, 1.0, low_open=True)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise ApiError(400, "stream_options: must be an object", param="stream_options")
        usage = options.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise ApiError(
                400,
                "stream_options.include_usage: must be true or false",
                param="stream_options.include_usage",
            )
    return ProxyRequest(route, body, model, stream, n)


def _check_responses(body: dict[str, Any]) -> None:
    """A Responses request: ``input`` is text or a list of items; the limit a positive int."""
    given = body.get("input")
    if given is None and body.get("previous_response_id") is None:
        raise ApiError(400, "input: required, a string or a list of input items", param="input")
    if given is not None and not isinstance(given, str | list):
        raise ApiError(400, "input: must be a string or a list of input items", param="input")
    if isinstance(given, list):
        for i, item in enumerate(given):
            if not isinstance(item, dict):
                raise ApiError(400, f"input.{i}: must be an object", param=f"input.{i}")
    limit = body.get("max_output_tokens")
    if limit is not None:
        _check_count("max_output_tokens", limit)
    _check_number(body, "temperature", 0.0, 2.0, low_open=False)
    _check_number(body, "top_p", 0.0, 1.0, low_open=True)


_ANTHROPIC_ROLES = frozenset({"user", "assistant"})


def _check_anthropic_messages(body: dict[str, Any]) -> None:
    """A Messages request: user and assistant messages, and the ``max_tokens`` it requires."""
    _check_messages(
        body.get("messages"),
        _ANTHROPIC_ROLES,
        null_content=False,
        content_is="a string or a list of blocks",
    )
    _check_count("max_tokens", body.get("max_tokens"), "required, an integer of at least 1")
    _check_number(body, "temperature", 0.0, 1.0, low_open=False)
    _check_number(body, "top_p", 0.0, 1.0, low_open=True)


def _check_messages(
    messages: Any,
    roles: frozenset[str] = _ROLES,
    *,
    null_content: bool = True,
    content_is: str = "a string, a list of parts or null",
) -> None:
    """A non-empty list of messages, each an object with one of ``roles`` and content that
    is text or a list (or null, where the API allows it)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: required, a non-empty list of messages", param="messages")
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise ApiError(400, f"{where}: must be an object", param=where)
        role = message.get("role")
        if not isinstance(role, str) or role not in roles:
            raise ApiError(
                400,
                f"{where}.role: got {role!r} (accepted: {', '.join(sorted(roles))})",
                param=f"{where}.role",
            )
        content = message.get("content")
        if (content is not None or not null_content) and not isinstance(content, str | list):
            raise ApiError(400, f"{where}.content: must be {content_is}", param=f"{where}.content")


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt) or all(_is_int(p) for p in prompt):
            return
        if all(isinstance(p, list) and all(_is_int(t) for t in p) for p in prompt):
            return
    raise ApiError(
        400,
        "prompt: required, a string, a list of strings, or token ids",
        param="prompt",
    )


def _check_number(
    body: dict[str, Any], name: str, low: float, high: float, *, low_open: bool
) -> None:
    value = body.get(name)
    if value is None:
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or value > high or value < low or (low_open and value == low):
        bound = f"above {low:g}" if low_open else f"at least {low:g}"
        raise ApiError(400, f"{name}: must be a number {bound} and at most {high:g}", param=name)


def _check_count(name: str, value: Any, wanted: str = "must be an integer of at least 1") -> None:
    """A count the client sets (``n``, a token limit): an integer, 1 to :data:`MOST_COUNT`."""
    if not _is_int(value) or value < 1:
        raise ApiError(400, f"{name}: {wanted}", param=name)
    if value > MOST_COUNT:
        raise ApiError(400, f"{name}: must be at most {MOST_COUNT}, got {value}", param=name)


def _too_deep(raw: bytes, body: dict[str, Any]) -> bool:
    """Whether ``body`` nests more than :data:`MAX_DEPTH` arrays and objects. A body with
    fewer brackets than that in all (most: long texts, token lists) is not walked."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    level: list[Any] = [body]
    for _ in range(MAX_DEPTH):
        inner: list[Any] = []
        for node in level:
            for value in node.values() if type(node) is dict else node:
                if type(value) is dict or type(value) is list:  # (what orjson makes)
                    inner.append(value)
        if not inner:
            return False
        level = inner
    return True


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
