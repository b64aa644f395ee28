"""A Responses or Messages request as the chat completions request that asks the same.

Only what chat can say is carried; a field that would change the question and cannot be said
in chat (tools, images, a stored conversation) is refused with a 400 naming it, never dropped:
the client would get an answer to another question. Fields that only shape how the upstream
stores or bills the request (``metadata``, ``store``, ``service_tier``, ...) are left out, and
so are the sampling options chat lacks (``top_k``) and Anthropic's ``thinking`` switch (the
upstream reasons as it does; its reasoning is translated).

==========================  ===============================  ==========================
Responses                   Messages                         chat
==========================  ===============================  ==========================
``instructions``            ``system`` (text, text blocks)   a first ``system`` message
``input`` (text, message    ``messages`` (text, text         ``messages``
items of text)              blocks)
``max_output_tokens``       ``max_tokens``                   ``max_tokens``
(none)                      ``stop_sequences``               ``stop``
``temperature``, ``top_p``  ``temperature``, ``top_p``       the same
``reasoning.effort``        (none)                           ``reasoning_effort``
``text.format``             (none)                           ``response_format``
``user``                    (none)                           ``user``
==========================  ===============================  ==========================

The reasoning of earlier turns (Responses ``reasoning`` items, Messages ``thinking`` and
``redacted_thinking`` blocks) is left out: chat has no place for it, and a client that sends
an answer back as it got it (the SDKs' ``[*response.output, ...]``, ``message.content``) sends
the reasoning the gateway translated. It is not part of the question (Anthropic's API drops
earlier turns' thinking too). A stored prompt (Responses ``prompt``) and MCP servers
(Messages ``mcp_servers``, tools) are refused.

A streamed request asks for the usage chunk (``stream_options.include_usage``): the
translated stream's closing events carry the counts.
"""

from __future__ import annotations

from typing import Any

from steadystream._api_errors import ApiError

__all__ = ["chat_request"]

_INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
_INPUT_PARTS = frozenset({"input_text", "output_text"})
_TEXT_BLOCKS = frozenset({"text"})
_THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})  # (an earlier turn's: left out)
_KEPT = ("temperature", "top_p")


def chat_request(route: str, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """The chat completions body that asks what ``body`` (a ``route`` request) asks; the
    model is left as the client named it. :class:`ApiError` (400) names a field chat cannot
    carry."""
    if route == "responses":
        chat = _from_responses(body)
    elif route == "messages":
        chat = _from_messages(body)
    else:
        raise ValueError(f"no translation of {route!r} requests into chat")
    chat["model"] = body["model"]
    for name in _KEPT:
        if body.get(name) is not None:
            chat[name] = body[name]
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


# -- the Responses API ------------------------------------------------------------------------


def _from_responses(body: dict[str, Any]) -> dict[str, Any]:
    _refuse_if_set(body, "previous_response_id", "a stored response cannot be continued")
    _refuse_if_set(body, "conversation", "a stored conversation cannot be continued")
    _refuse_if_set(body, "tools", "tools are not translated")
    _refuse_if_set(body, "prompt", "a stored prompt cannot be used")
    if body.get("background"):
        raise _untranslatable(
            "background", "a background response is not translated (it is stored upstream)"
        )
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _untranslatable("instructions", "must be a string")
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    else:
        for i, item in enumerate(given or ()):
            if item.get("type") != "reasoning":  # (an earlier turn's: see the docstring)
                messages.append(_input_message(item, i))
    if not messages:
        raise _untranslatable("input", "at least one message is needed")
    chat: dict[str, Any] = {"messages": messages}
    limit = body.get("max_output_tokens")
    if limit is not None:
        chat["max_tokens"] = limit
    effort = _reasoning_effort(body.get("reasoning"))
    if effort is not None:
        chat["reasoning_effort"] = effort
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    user = body.get("user")
    if user is not None:
        if not isinstance(user, str):  # (dropped, it would no longer name whom to bill)
            raise _untranslatable("user", "must be a string")
        chat["user"] = user
    return chat


def _input_message(item: dict[str, Any], i: int) -> dict[str, Any]:
    """One ``input`` item (parse_request checked it is an object) as a chat message."""
    where = f"input.{i}"
    kind = item.get("type", "message")
    if kind != "message":
        raise _untranslatable(
            f"{where}.type",
            f"got {kind!r}; only message items are translated (accepted: message)",
        )
    role = item.get("role")
    if not isinstance(role, str) or role not in _INPUT_ROLES:
        raise _untranslatable(
            f"{where}.role", f"got {role!r} (accepted: {', '.join(sorted(_INPUT_ROLES))})"
        )
    return {
        "role": role,
        "content": _text_content(item.get("content"), f"{where}.content", _INPUT_PARTS),
    }


def _reasoning_effort(reasoning: Any) -> str | None:
    if reasoning is None:
        return None
    if not isinstance(reasoning, dict):
        raise _untranslatable("reasoning", "must be an object")
    effort = reasoning.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise _untranslatable("reasoning.effort", "must be a string")
    return effort


def _response_format(text: Any) -> dict[str, Any] | None:
    """``text.format`` in chat's ``response_format`` (plain text: none)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _untranslatable("text", "must be an object")
    given = text.get("format")
    if given is None:
        return None
    if not isinstance(given, dict):
        raise _untranslatable("text.format", "must be an object")
    kind = given.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: given[k] for k in ("name", "schema", "strict", "description") if k in given}
        return {"type": "json_schema", "json_schema": schema}
    raise _untranslatable(
        "text.format.type", f"got {kind!r} (accepted: text, json_object, json_schema)"
    )


# -- Anthropic Messages -----------------------------------------------------------------------


def _from_messages(body: dict[str, Any]) -> dict[str, Any]:
    _refuse_if_set(body, "tools", "tools are not translated")
    _refuse_if_set(body, "mcp_servers", "MCP servers' tools are not translated")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        content = _text_content(system, "system", _TEXT_BLOCKS)
        messages.append({"role": "system", "content": content})
    for i, message in enumerate(body["messages"]):  # parse_request checked roles and shapes
        given, role = message["content"], message["role"]
        skipped = _THINKING_BLOCKS if role == "assistant" else frozenset()
        content = _text_content(given, f"messages.{i}.content", _TEXT_BLOCKS, skipped)
        if content == [] and given:  # (a turn of reasoning alone: nothing chat can say of it)
            continue
        messages.append({"role": role, "content": content})
    chat: dict[str, Any] = {"messages": messages, "max_tokens": body["max_tokens"]}
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _untranslatable("stop_sequences", "must be a list of strings")
        if stops:
            chat["stop"] = stops
    return chat


# -- shared -----------------------------------------------------------------------------------


def _text_content(
    content: Any, field: str, accepted: frozenset[str], skipped: frozenset[str] = frozenset()
) -> str | list[dict[str, str]]:
    """``field``, a content of text (a string, or a list of text parts or blocks), in chat's
    shape: the string, or chat's text parts (one part: its string); parts of a ``skipped``
    type are left out."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _untranslatable(field, "must be a string or a list of text parts")
    parts: list[dict[str, str]] = []
    for j, part in enumerate(content):
        at = f"{field}.{j}"
        if not isinstance(part, dict):
            raise _untranslatable(at, "must be an object")
        kind = part.get("type")
        if kind in skipped:
            continue
        if not isinstance(kind, str) or kind not in accepted:
            raise _untranslatable(
                f"{at}.type",
                f"got {kind!r}; only text is translated (accepted: {', '.join(sorted(accepted))})",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise _untranslatable(f"{at}.text", "must be a string")
        parts.append({"type": "text", "text": text})
    if len(parts) == 1:
        return parts[0]["text"]
    return parts


def _refuse_if_set(body: dict[str, Any], name: str, why: str) -> None:
    value = body.get(name)
    if value is not None and value != []:
        raise _untranslatable(name, f"{why} for an upstream that speaks only chat")


def _untranslatable(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="untranslatable")
