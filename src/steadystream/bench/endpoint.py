"""The endpoint under test: where requests go, what they carry, and what may be shown of them.

An :class:`Endpoint` knows the URL (an API base as the openai SDK takes it, such as
``http://127.0.0.1:8000/v1``), the model, the wire format (chat or completions), the API key
and extra headers. It builds request bodies and headers; it never prints the key, and
:meth:`Endpoint.shown_headers` redacts any header that looks like a credential.
:meth:`Endpoint.scrubber` hides :meth:`Endpoint.secrets` in what a server says back (an error
that quotes the key).

Usage reporting (``stream_options``), from most to least informative:

- ``continuous``: ``include_usage`` and vLLM's ``continuous_usage_stats``, so every chunk says
  how many tokens it brought (exact per-chunk counts);
- ``on``: ``include_usage`` only: one total at the end, spread over the chunks;
- ``off``: nothing; token counts are estimated from the text.

``auto`` starts at ``continuous`` and steps down when a server rejects the request with 400
or 422, so any OpenAI-compatible server can be benched without knowing what it supports.

The OpenAI Responses API (``responses``) and Anthropic's Messages API (``messages``) always
give usage, at the end (Responses) or in ``message_delta`` (Messages): nothing is asked for,
and nothing steps down. Messages requires ``max_tokens``: a request without one asks for
:data:`MESSAGES_MAX_TOKENS`, and the key goes in ``x-api-key`` with the ``anthropic-version``
the API wants.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from yarl import URL

from steadystream._exceptions import SpecError
from steadystream._scrubbing import KeyScrubber, hidden_key
from steadystream._validation import shown_url
from steadystream.bench.workload import RequestSpec

__all__ = [
    "ANTHROPIC_VERSION",
    "MESSAGES_MAX_TOKENS",
    "USAGE_LEVELS",
    "Endpoint",
    "headers_from",
    "parse_header",
    "redact",
]

USAGE_LEVELS = ("off", "on", "continuous")  # index = how much usage is asked for
_USAGE_MODES = ("auto", *USAGE_LEVELS)
_ENDPOINTS = {
    "chat": "chat/completions",
    "completions": "completions",
    "responses": "responses",
    "messages": "messages",
}
_ALWAYS_USAGE = ("responses", "messages")  # APIs that give usage unasked
_LIMIT_FIELDS = {"responses": "max_output_tokens", "messages": "max_tokens"}
MESSAGES_MAX_TOKENS = 4096
"""What a Messages request asks for when the workload sets no max_tokens (the API needs one)."""
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header Messages requests carry (``--header`` may set another)."""
_SECRET_HEADER = re.compile(
    r"authorization|api[-_]?key|token|secret|passw(or)?d|cookie|credential|signature",
    re.IGNORECASE,
)
_REDACTED = "***"


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` as given to ``--header``."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name or any(c.isspace() for c in name):
        shown = "(not shown: it may hold a credential)" if _SECRET_HEADER.search(text) else text
        raise SpecError(f"--header: expected 'Name: value', got {shown!r}")
    return name, value.strip()


def redact(text: str) -> str:
    """A header line safe to show: the value is hidden when the name looks like a credential."""
    name, sep, _ = text.partition(":")
    return f"{name}: {_REDACTED}" if sep and _SECRET_HEADER.search(name) else text


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An OpenAI-compatible streaming endpoint and how to call it."""

    base_url: str
    model: str
    kind: str = "chat"  # the API: chat, completions, responses or messages
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    usage: str = "auto"
    ignore_eos: bool = False
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    # The header that carries each request's id (None: send none). llama-cpp-python's server
    # refuses, with an empty 400, any X-Request-Id that is not a UUID (docs/engines.md).
    request_id_header: str | None = "X-Request-Id"

    def __post_init__(self) -> None:
        if self.kind not in _ENDPOINTS:
            known = ", ".join(_ENDPOINTS)
            raise SpecError(f"--endpoint must be one of {known}, got {self.kind!r}")
        if self.usage not in _USAGE_MODES:
            raise SpecError(f"--usage must be one of {', '.join(_USAGE_MODES)}, got {self.usage!r}")
        if not self.model:
            raise SpecError("--model is required: the model name the server serves")
        shown = shown_url(self.base_url)  # (a password or a key in the URL is never said)
        try:
            url = URL(self.base_url)
        except (ValueError, TypeError) as exc:
            raise SpecError(f"cannot read {shown!r} as a URL: {exc}") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise SpecError(
                f"URL must be an http(s) API base such as http://127.0.0.1:8000/v1, got {shown!r}"
            )
        if url.raw_query_string or url.raw_fragment or self.base_url.rstrip("/").endswith("?"):
            # (the API's path goes after the base's: after a query it would be the query's)
            raise SpecError(
                f"URL must be an API base with no query or fragment, such as "
                f"http://127.0.0.1:8000/v1, got {shown!r} and a query or fragment (not shown)"
            )
        names = {name.lower() for name, _ in self.headers}
        id_header = self.request_id_header
        if id_header is not None:
            if not id_header or any(c.isspace() or c == ":" for c in id_header):
                raise SpecError(f"--request-id-header: not a header name: {id_header!r}")
            if id_header.lower() in names:
                raise SpecError(f"--header: {id_header} is set by bench for every request")

    @property
    def url(self) -> str:
        """Where requests are posted."""
        return f"{self.base_url.rstrip('/')}/{self.path}"

    @property
    def path(self) -> str:
        """What is added to the API base: ``chat/completions``, ``completions``,
        ``responses`` or ``messages``."""
        return _ENDPOINTS[self.kind]

    @property
    def origin(self) -> str:
        """The server's root (``scheme://host:port``), where the lab serves its ground truth."""
        return str(URL(self.base_url).origin())

    @property
    def first_usage_level(self) -> int:
        if self.kind in _ALWAYS_USAGE:
            return USAGE_LEVELS.index("on")  # given unasked: nothing to step down from
        return len(USAGE_LEVELS) - 1 if self.usage == "auto" else USAGE_LEVELS.index(self.usage)

    @property
    def steps_down(self) -> bool:
        """Whether a refused request is tried again asking for less usage."""
        return self.kind not in _ALWAYS_USAGE

    def max_tokens(self, spec: RequestSpec) -> int | None:
        """The token limit the request's body sets (``--extra-body`` has the last word).

        A stream that stops for length without reporting usage made exactly this many.
        """
        limit: object = spec.max_tokens
        if limit is None and self.kind == "messages":
            limit = MESSAGES_MAX_TOKENS
        for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            if name in self.extra_body:
                limit = self.extra_body[name]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            return None
        return limit

    def body(self, spec: RequestSpec, usage_level: int) -> bytes:
        """The JSON body of one streamed request."""
        payload: dict[str, Any] = {"model": self.model, "stream": True}
        if self.kind in _LIMIT_FIELDS:
            return self._typed_body(payload, spec)
        if self.kind == "chat":
            payload["messages"] = list(spec.messages)
        else:
            payload["prompt"] = spec.prompt_text
        if spec.max_tokens is not None:
            payload["max_tokens"] = spec.max_tokens
            if self.ignore_eos:
                payload["ignore_eos"] = True
        if usage_level >= 1:
            options: dict[str, bool] = {"include_usage": True}
            if usage_level >= 2:
                options["continuous_usage_stats"] = True
            payload["stream_options"] = options
        payload.update(self.extra_body)
        return orjson.dumps(payload)

    def _typed_body(self, payload: dict[str, Any], spec: RequestSpec) -> bytes:
        """A Responses or Messages body: the conversation, its system text apart for
        Messages, and the token limit under the API's own name."""
        messages = [dict(message) for message in spec.messages]
        if self.kind == "responses":
            payload["input"] = messages
        else:
            system = [_text_of(m.get("content")) for m in messages if m.get("role") == "system"]
            if system:
                payload["system"] = "\n\n".join(system)
            payload["messages"] = [m for m in messages if m.get("role") != "system"]
        limit = spec.max_tokens
        if limit is None and self.kind == "messages":
            limit = MESSAGES_MAX_TOKENS
        if limit is not None:
            payload[_LIMIT_FIELDS[self.kind]] = limit
        payload.update(self.extra_body)
        return orjson.dumps(payload)

    def request_headers(self, request_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.request_id_header is not None:
            headers[self.request_id_header] = request_id
        if self.kind == "messages":
            headers["anthropic-version"] = ANTHROPIC_VERSION
        if self.api_key:
            if self.kind == "messages":
                headers["x-api-key"] = self.api_key
            else:
                headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers

    def shown_headers(self) -> list[str]:
        """The extra headers as they may be printed (credentials redacted)."""
        lines = [redact(f"{name}: {value}") for name, value in self.headers]
        if self.api_key:
            shown = "x-api-key: " if self.kind == "messages" else "Authorization: Bearer "
            lines.insert(0, shown + _REDACTED)
        return lines

    def secrets(self) -> tuple[str, ...]:
        """What the requests carry that no record may: the key, and the value of every header
        whose name looks like a credential (a ``Bearer`` token alone too), longest first; a
        placeholder (vLLM's ``EMPTY``) is no secret (:data:`MIN_HIDDEN_KEY_CHARS`)."""
        found = [self.api_key or ""]
        for name, value in self.headers:
            if _SECRET_HEADER.search(name):
                found += [value, value.partition(" ")[2].strip()]
        kept = {secret for secret in found if hidden_key(secret)}
        return tuple(sorted(kept, key=len, reverse=True))

    def scrubber(self) -> KeyScrubber | None:
        """Hides :meth:`secrets` in what a server says back (an error that quotes the key, a
        kept answer), as the gateway hides its keys; None: nothing to hide."""
        secrets = self.secrets()
        return KeyScrubber([secret.encode() for secret in secrets]) if secrets else None

    def describe(self) -> str:
        return f"{self.url} (model {self.model}, {self.kind})"

    def likelier_base(self) -> str | None:
        """The API base that was probably meant, when this one answered 404: the URL without
        the endpoint's path (the whole ``.../v1/chat/completions`` given), or with the
        ``/v1`` most servers serve their API under; None when it already ends in ``/v1``."""
        base = self.base_url.rstrip("/")
        for path in _ENDPOINTS.values():
            if base.endswith(f"/{path}"):
                return base.removesuffix(f"/{path}")
        return None if base.endswith("/v1") else f"{base}/v1"


def headers_from(lines: Sequence[str]) -> tuple[tuple[str, str], ...]:
    return tuple(parse_header(line) for line in lines)


def _text_of(content: Any) -> str:
    """A message's text: its string, or the text of its parts (``{"type": "text", ...}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""
