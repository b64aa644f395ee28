"""OpenAI-compatible streaming payloads: what one chunk means, and how servers build one.

:func:`parse_chunk` says what one SSE data payload is to the timeline: a role-only opener
(which is not the first token: TTFT must not be taken on it), content, reasoning, a tool
call, a usage-only tail, an empty delta, or an in-band error. It reads the chat shape
(``choices[i].delta``) and the completions shape (``choices[i].text``), both names servers
use for reasoning (``reasoning_content``, vLLM's newer ``reasoning``), and the error shapes
servers send mid-stream (``{"error": {...}}``, ``{"error": "..."}``, vLLM's older top-level
``{"object": "error", ...}``). A refusal (``delta.refusal``: what the person reads in place of
the answer) is content. A payload that is not JSON, or JSON of the wrong shape,
raises :class:`ProtocolError` naming what was wrong; missing optional fields are not wrong.

:func:`chat_chunk` and friends build the payloads servers send (the lab engine, the
gateway), shaped like vLLM's OpenAI server output: ``id``, ``object``, ``created``,
``model``, ``choices`` (``index``, ``delta`` or ``text``, ``logprobs``, ``finish_reason``) and
``usage`` only when there is one.

This runs once per chunk on hot paths: one ``orjson.loads`` and a few dict look-ups.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeGuard

import orjson

from steadystream._exceptions import ProtocolError
from steadystream._scrubbing import one_line
from steadystream._types import EventKind

__all__ = [
    "Chunk",
    "chat_chunk",
    "classify_chunk",
    "completion_chunk",
    "encode_chunk",
    "error_payload",
    "is_done",
    "parse_chunk",
    "usage_chunk",
]


class Chunk(NamedTuple):
    """What one data payload means to the timeline.

    When one delta carries text of several kinds (rare), ``kind`` is the first of content,
    reasoning, tool call that is present and ``text`` holds all of it, so byte counts stay
    right.
    """

    kind: EventKind
    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    error: str | None = None


# Reasoning arrives as reasoning_content (DeepSeek, older vLLM) or reasoning (newer vLLM).
_REASONING_FIELDS = (
    ("reasoning_content", "delta.reasoning_content"),
    ("reasoning", "delta.reasoning"),
)


# -- reading chunks -----------------------------------------------------------------------------


def is_done(data: str | bytes) -> bool:
    """Whether a data payload is the ``[DONE]`` end marker."""
    if isinstance(data, bytes):
        return data.strip() == b"[DONE]"
    return data.strip() == "[DONE]"


def parse_chunk(data: str | bytes, *, event: str = "message") -> Chunk:
    """Classify one SSE data payload; ``event`` is the SSE event type it came with.

    Check :func:`is_done` first: ``[DONE]`` is not a chunk. Raises :class:`ProtocolError`
    when the payload is not JSON or not shaped like a chunk.
    """
    if event == "error":
        return Chunk(EventKind.ERROR, error=_error_event_message(data))
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        hint = " ([DONE] is the end marker: check is_done() first)" if is_done(data) else ""
        raise ProtocolError(f"chunk is not valid JSON: {exc}{hint}: {_preview(data)}") from exc
    return classify_chunk(obj, data)


def classify_chunk(obj: Any, data: str | bytes = b"") -> Chunk:
    """:func:`parse_chunk` for a payload already parsed into ``obj`` (``data``: for messages)."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"chunk must be a JSON object, got {_json_type(obj)}: {_preview(data)}")
    if "error" in obj and obj["error"] is not None:
        return Chunk(EventKind.ERROR, error=_error_message(obj["error"]))
    if obj.get("object") == "error":
        return Chunk(EventKind.ERROR, error=_error_message(obj))
    usage = _usage(obj.get("usage"))
    choices = obj.get("choices")
    if choices is None:
        if usage is not None:
            return Chunk(EventKind.USAGE, usage=usage)
        raise ProtocolError(f"chunk has no choices, usage or error: {_preview(data)}")
    if not isinstance(choices, list):
        raise ProtocolError(f"choices is {_json_type(choices)}, expected a list")
    if not choices:
        return Chunk(EventKind.USAGE if usage is not None else EventKind.EMPTY, usage=usage)
    return _classify_choices(choices, usage)


def _classify_choices(choices: list[Any], usage: dict[str, int] | None) -> Chunk:
    # Hot path: paths for error messages are only formatted when something is wrong.
    content: list[str] = []
    reasoning: list[str] = []
    tools: list[str] = []
    has_role = False
    finish_reason: str | None = None
    for i, choice in enumerate(choices):
        if type(choice) is not dict:
            raise ProtocolError(f"choices[{i}] is {_json_type(choice)}, expected an object")
        reason = choice.get("finish_reason")
        if reason is not None:
            finish_reason = _string(reason, i, "finish_reason")
        delta = choice.get("delta")
        if delta is None:  # the completions shape
            text = _string(choice.get("text"), i, "text")
            if text:
                content.append(text)
            continue
        if type(delta) is not dict:
            raise ProtocolError(f"choices[{i}].delta is {_json_type(delta)}, expected an object")
        if delta.get("role") is not None:
            has_role = True
        text = _string(delta.get("content"), i, "delta.content")
        if text:
            content.append(text)
        refusal = delta.get("refusal")  # (a name some servers send null or odd: only text counts)
        if type(refusal) is str and refusal:
            content.append(refusal)
        for key, field in _REASONING_FIELDS:
            text = _string(delta.get(key), i, field)
            if text:
                reasoning.append(text)
                break
        if delta.get("tool_calls") is not None or delta.get("function_call") is not None:
            tools.extend(_tool_call_texts(delta, i))
    if content:
        kind = EventKind.CONTENT
    elif reasoning:
        kind = EventKind.REASONING
    elif tools:
        kind = EventKind.TOOL_CALL
    elif has_role:
        kind = EventKind.ROLE
    else:
        kind = EventKind.EMPTY
    if not reasoning and not tools:
        return Chunk(kind, "".join(content), finish_reason, usage)
    return Chunk(kind, "".join(reasoning + content + tools), finish_reason, usage)


def _tool_call_texts(delta: dict[str, Any], i: int) -> list[str]:
    # What a tool call streams to the user is its function name, then its arguments.
    calls = delta.get("tool_calls")
    functions: list[tuple[Any, str]] = []
    if calls is not None:
        if type(calls) is not list:
            raise ProtocolError(
                f"choices[{i}].delta.tool_calls is {_json_type(calls)}, expected a list"
            )
        for j, call in enumerate(calls):
            if type(call) is not dict:
                raise ProtocolError(f"choices[{i}].delta.tool_calls[{j}] is {_json_type(call)}")
            functions.append((call.get("function"), f"delta.tool_calls[{j}].function"))
    if delta.get("function_call") is not None:  # the deprecated single-function shape
        functions.append((delta["function_call"], "delta.function_call"))
    texts: list[str] = []
    for function, path in functions:
        if function is None:
            continue
        if type(function) is not dict:
            raise ProtocolError(
                f"choices[{i}].{path} is {_json_type(function)}, expected an object"
            )
        for key in ("name", "arguments"):
            text = _string(function.get(key), i, f"{path}.{key}")
            if text:
                texts.append(text)
    return texts


def _string(value: Any, i: int, field: str) -> str:
    if value is None:
        return ""
    if type(value) is not str:
        raise ProtocolError(
            f"choices[{i}].{field} is {_json_type(value)}, expected a string or null"
        )
    return value


MAX_COUNT = 2**62
"""A token count at or past this is no count (a timeline's columns hold 64-bit integers)."""


def is_count(value: object) -> TypeGuard[int]:
    """Whether an upstream's ``value`` is a token count a timeline can hold."""
    return type(value) is int and 0 <= value < MAX_COUNT


def _usage(value: Any) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"usage is {_json_type(value)}, expected an object or null")
    # Timelines keep counts only, and only counts they can hold (an upstream's 2**64 is
    # none): the nested details' two that a translation carries on come up flat, as the
    # Responses dialect's do (cached_tokens, reasoning_tokens); the rest of them is dropped.
    counts = {k: v for k, v in value.items() if is_count(v)}
    for details, name in _DETAIL_COUNTS:
        inner = value.get(details)
        if isinstance(inner, dict) and is_count(inner.get(name)):
            counts.setdefault(name, inner[name])
    return counts


_DETAIL_COUNTS = (
    ("prompt_tokens_details", "cached_tokens"),
    ("completion_tokens_details", "reasoning_tokens"),
)


def _dump_json(value: Any) -> bytes:
    """``value`` (JSON data an upstream sent, parsed) as compact JSON again.

    orjson writes at most 254 levels of nesting and reads up to 1,024: what an upstream sent
    deeper than orjson writes goes through the standard library's encoder; deeper than that
    encoder can go is a :class:`ProtocolError`, never a crash of the stream's writer.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        except (RecursionError, TypeError, ValueError):
            raise ProtocolError("an upstream payload is nested too deep to encode") from None


def _error_message(error: Any) -> str:
    """A server's error (a string, an object with a ``message``, anything) as one line: its
    words may hold line breaks, which would forge lines in a log."""
    if isinstance(error, str):
        return one_line(error) or "error with no message"
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return one_line(message)
    try:
        return one_line(_dump_json(error).decode())
    except ProtocolError:
        return "error whose message is nested too deep to read"


def _error_event_message(data: str | bytes) -> str:
    """A server's error event's message, as one line (its words may hold line breaks)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return one_line(text.strip()) or "error event with no message"
    if isinstance(obj, dict) and obj.get("error") is not None:
        return _error_message(obj["error"])
    return _error_message(obj)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _preview(data: str | bytes, limit: int = 80) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- building chunks ----------------------------------------------------------------------------


def chat_chunk(
    id: str,
    model: str,
    created: int,
    *,
    content: str | None = None,
    role: str | None = None,
    finish_reason: str | None = None,
    reasoning: str | None = None,
    usage: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` payload; only the delta fields given are sent.

    Reasoning goes out as ``reasoning_content``, the name most clients read (vLLM's newer
    ``reasoning`` is accepted by :func:`parse_chunk` too). ``usage`` attaches per-chunk
    running usage, as vLLM's continuous usage stats do.
    """
    delta: dict[str, str] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return _payload(id, "chat.completion.chunk", model, created, [choice], usage)


def completion_chunk(
    id: str,
    model: str,
    created: int,
    *,
    text: str,
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A ``text_completion`` streaming payload (the completions endpoint)."""
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _payload(id, "text_completion", model, created, [choice], usage)


def usage_chunk(
    id: str,
    model: str,
    created: int,
    *,
    object_name: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """The usage-only final payload (empty choices) sent when the client asked for usage."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return _payload(id, object_name, model, created, [], usage)


def error_payload(
    message: str,
    type: str = "server_error",
    code: str | int | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def encode_chunk(payload: Mapping[str, Any]) -> bytes:
    """One payload as an SSE event (JSON never holds a raw line end, so one data line)."""
    return b"data: " + _dump_json(payload) + b"\n\n"


def _payload(
    id: str,
    object_name: str,
    model: str,
    created: int,
    choices: list[dict[str, Any]],
    usage: Mapping[str, int] | None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": id,
        "object": object_name,
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage is not None:  # vLLM leaves usage out of chunks that have none
        payload["usage"] = dict(usage)
    return payload
