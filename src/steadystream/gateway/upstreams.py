"""Calling upstreams: request bodies (continuations included), one aiohttp session, mapped errors.

aiohttp's exceptions never leave this module (they are mapped in
:func:`~steadystream._transport_errors.map_transport_errors`): a connection that cannot be
made is an :class:`~steadystream.UpstreamConnectError`, an HTTP error status an
:class:`~steadystream.UpstreamStatusError` carrying the upstream's own message (and its
``Retry-After``), a stream that breaks an :class:`~steadystream.UpstreamStreamError`.
Upstream keys come from the environment, are sent only in the ``Authorization`` header, and
are scrubbed from every message that could reach a log, a recording, a metric or a client
(:meth:`UpstreamPool.redact`).

A streamed answer goes over a stamped connection (:meth:`UpstreamPool.post_stream`, the
kernel's receive stamps where the platform gives them); aiohttp serves the calls that need no
stamps (non-streaming answers, ``/models``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson

from steadystream._clock import Clock
from steadystream._exceptions import (
    ConfigError,
    ProtocolError,
    UpstreamConnectError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from steadystream._scrubbing import MIN_HIDDEN_KEY_CHARS, KeyScrubber, hidden_key, one_line
from steadystream._transport_errors import (
    map_transport_errors,
)
from steadystream.gateway.config import GatewayConfig, UpstreamConfig
from steadystream.gateway.failover import Action, Progress
from steadystream.gateway.requests import ProxyRequest
from steadystream.gateway.translation import chat_request, upstream_api
from steadystream.stamped import StampedConnection, Target, connection_type, resolve_stamps

__all__ = [
    "ResponseTooLargeError",
    "UpstreamPool",
    "UpstreamTimeoutError",
    "build_body",
    "open_session",
    "read_whole",
    "safe_header",
]

log = logging.getLogger("steadystream.gateway")

_ERROR_BODY_LIMIT = 4096
_MESSAGE_LIMIT = 4096  # characters of an upstream's text kept in a message (redact)
_READ_BUFSIZE = 1 << 16  # per response: part of the per-stream memory bound
_RETRY_AFTER = re.compile(
    r"^(?:[0-9]{1,9}|[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9:]{8} GMT)$"
)
_MEDIA_TYPE = re.compile(
    r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(?:; ?charset=[A-Za-z0-9_-]+)?$"
)


class ResponseTooLargeError(UpstreamStreamError):
    """A non-streaming answer larger than ``limits.max_response_bytes``."""


def safe_header(value: str | None, pattern: re.Pattern[str]) -> str | None:
    """An upstream header value the gateway may pass on: only one of the expected shape.

    An upstream's headers are text from outside: a value is relayed only when it matches
    what the header can hold, so nothing else it echoes (a key) reaches a client or a log.
    """
    if value is None or len(value) > 200 or not pattern.match(value):
        return None
    return value


def retry_after(response: aiohttp.ClientResponse) -> str | None:
    """The upstream's ``Retry-After`` (seconds or an HTTP date), when it sent a valid one."""
    return safe_header(response.headers.get("Retry-After"), _RETRY_AFTER)


def media_type(response: aiohttp.ClientResponse) -> str:
    """The upstream's content type when it is a plain media type, else JSON."""
    found = safe_header(response.headers.get("Content-Type"), _MEDIA_TYPE)
    return found if found is not None else "application/json"


def open_session(config: GatewayConfig) -> aiohttp.ClientSession:
    """The session every upstream call goes through: pooled, uncompressed, no read timeout.

    Stalls are the watchdog's to judge (on tokens, not bytes), so sockets get no read
    timeout here; connects do.
    """
    connector = aiohttp.TCPConnector(
        limit=config.limits.max_connections, limit_per_host=0, ttl_dns_cache=300
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=_READ_BUFSIZE,
        auto_decompress=False,
    )


ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` a Messages request carries upstream when its client sent none."""
ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
"""What a Messages client says of the API it speaks: passed on to the upstream."""
TRACE_HEADERS = ("traceparent", "tracestate")
"""W3C Trace Context, passed on whenever the client headers carry it: with telemetry on the
gateway puts its own span's there (gateway/telemetry.py)."""


def build_body(
    request: ProxyRequest,
    upstream: UpstreamConfig,
    action: Action = Action.RETRY,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The body to send ``upstream`` for a first try, a retry, a continuation or a regeneration.

    A continuation never re-sends committed text to the client: it asks the upstream to go
    on *from* it. The token limit shrinks by what was already committed, so the whole answer
    stays within what the client asked for. A request the upstream takes in chat only is
    translated (gateway/translation; it is never continued: a typed stream is failed over
    only before the client had any of it).
    """
    if upstream_api(upstream, request.route) != request.route:
        body = chat_request(request.route, request.body, stream=request.stream)
        body["model"] = upstream.upstream_model(request.model)
        return body
    body = dict(request.body)
    body["model"] = upstream.upstream_model(request.model)
    if action is not Action.CONTINUE or progress is None:
        return body
    text = progress.content_text
    limit = request.max_tokens
    if limit is not None:
        left = max(1, limit - progress.tokens)
        body["max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"] = left
    if not request.chat:
        prompt = body["prompt"]
        body["prompt"] = prompt + text if isinstance(prompt, str) else [prompt[0] + text]
        return body
    prefix: dict[str, Any] = {"role": "assistant", "content": text}
    if upstream.chat_continuation == "prefix":
        prefix["prefix"] = True  # DeepSeek-style assistant prefix completion
    body["messages"] = [*body["messages"], prefix]
    if upstream.chat_continuation == "vllm":
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    return body


class UpstreamPool:
    """The configured upstreams, their keys, and the calls to them."""

    def __init__(
        self,
        config: GatewayConfig,
        session: aiohttp.ClientSession | None,
        env: Mapping[str, str],
    ) -> None:
        self.config = config
        self.session = session
        self.stamps = resolve_stamps("auto")  # for streamed answers (post_stream)
        self.upstreams = config.upstreams_in_order()
        self._keys: dict[str, str] = {}
        for index, upstream in enumerate(config.upstreams):
            if upstream.api_key_env is None:
                continue
            key = env.get(upstream.api_key_env)
            if not key:
                raise ConfigError(
                    f"key 'upstreams.{index}.api_key_env': the environment variable "
                    f"{upstream.api_key_env!r} (the key of upstream {upstream.name!r}) is not set"
                )
            self._keys[upstream.name] = key
        # What is scrubbed: the upstreams' keys and the tenants' gateway keys (a user may paste
        # one into a prompt and the model quote it back: it is not recorded either).
        named = [(f"upstream {name!r}", key) for name, key in self._keys.items()]
        for tenant in config.tenants:
            named += [(f"tenant {tenant.name!r}", env.get(var, "")) for var in tenant.api_key_env]
        self._secrets = list(dict.fromkeys(key for _, key in named if hidden_key(key)))
        for whose, key in named:
            if key and not hidden_key(key):
                log.warning(
                    "%s: its key is shorter than %d characters, a placeholder rather than a"
                    " secret: it is not hidden from answers, logs and recordings (hiding it"
                    " would turn every place a model writes it into ***)",
                    whose,
                    MIN_HIDDEN_KEY_CHARS,
                )
        self._scrubber = KeyScrubber([key.encode() for key in self._secrets])

    def __repr__(self) -> str:  # never the keys
        return f"<UpstreamPool {[u.name for u in self.upstreams]}>"

    def candidates(self, model: str) -> list[UpstreamConfig]:
        """The upstreams serving ``model``, in the order they are tried."""
        return [u for u in self.upstreams if u.serves(model)]

    def models(self) -> list[str]:
        """Every model named in the configuration, in order, once."""
        seen: dict[str, None] = {}
        for upstream in self.upstreams:
            for model in upstream.models:
                seen.setdefault(model, None)
        return list(seen)

    def redact(self, text: str, *, lines: bool = False) -> str:
        """``text`` with every upstream or gateway key (or a key's start) replaced by ``***``,
        as one line (a line break in an upstream's words would forge a line in the log), and
        cut to :data:`_MESSAGE_LIMIT` characters (an upstream's error event may be as
        large as ``limits.max_event_bytes``: one per stream would flood the log).
        ``lines``: its characters kept as they are (a value written only where it is
        escaped, as a label in a record and on ``/metrics``), keys hidden and cut alike.

        The same scrubber as the bytes bound for clients (:meth:`byte_scrubber`), on the
        text's bytes: what a client may not see is not logged or recorded either. The cut
        comes after it, so no key is cut where the scrubber would not know it.
        """
        text = self._scrubber.text(text)
        if not lines:
            text = one_line(text)
        if len(text) > _MESSAGE_LIMIT:
            return f"{text[:_MESSAGE_LIMIT]}... ({len(text)} characters)"
        return text

    def hide_keys(self, text: str) -> str:
        """``text`` with every upstream or gateway key (or a key's start) replaced by ``***``,
        and nothing else changed: an answer's text as recorded (``recording.keep_text``),
        whose line breaks and length are the answer's own (a JSONL line escapes them), not
        a message bound for a log line (:meth:`redact`)."""
        return self._scrubber.text(text)

    def byte_scrubber(self) -> Callable[[bytes], bytes] | None:
        """Hides every key in bytes bound for a client (None: no keys to hide).

        An answer that quotes an upstream's key (a provider echoing its ``Authorization``),
        or most of it, never reaches the client with it (:class:`~.scrubbing.KeyScrubber`).
        """
        return self._scrubber if self._secrets else None

    def _headers(
        self,
        upstream: UpstreamConfig,
        request_id: str,
        client_headers: Mapping[str, str],
        path: str = "",
    ) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if upstream.request_id_header is not None and request_id:
            headers[upstream.request_id_header] = request_id
        anthropic = path.startswith("/messages")
        if anthropic:  # the version the client asked for (Anthropic's API requires one)
            for name in ANTHROPIC_HEADERS:
                if (value := client_headers.get(name)) is not None:
                    headers[name] = value
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
        for name in upstream.forward_headers:
            value = client_headers.get(name)
            if value is not None:
                headers[name] = value
        for name in TRACE_HEADERS:  # the gateway's own span as the parent (telemetry on)
            if (value := client_headers.get(name)) is not None:
                headers[name] = value
        headers.update(upstream.headers)
        key = self._keys.get(upstream.name)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
            if anthropic:
                headers["x-api-key"] = key  # where Anthropic's API reads it
        return headers

    async def post(
        self,
        upstream: UpstreamConfig,
        path: str,
        body: dict[str, Any],
        *,
        request_id: str,
        client_headers: Mapping[str, str],
        timeout_s: float | None,
    ) -> aiohttp.ClientResponse:
        """Send a request; return the response once its headers arrived with a 2xx status.

        ``timeout_s`` bounds the wait for the response headers and, on an error status, for
        the body read (up to a few KiB) for the upstream's own message, together: an upstream
        that sends an error head and then nothing is not waited for past it (its message is
        then the status's reason). The response is closed.
        """
        session = self._session()
        url = f"{upstream.base_url}{path}"
        headers = self._headers(upstream, request_id, client_headers, path)
        timeout = aiohttp.ClientTimeout(total=None, connect=upstream.timeouts.connect / 1e9)
        deadline = _deadline(timeout_s)
        with map_transport_errors(
            UpstreamConnectError,
            f"cannot reach upstream {upstream.name!r}",
            timeout=lambda _: UpstreamTimeoutError(
                f"upstream {upstream.name!r} sent no response headers in time"
            ),
            redact=self.redact,
        ):
            async with asyncio.timeout_at(deadline):
                response = await session.post(
                    url, data=orjson.dumps(body), headers=headers, timeout=timeout
                )
        if 200 <= response.status < 300:  # (a 1xx that switched protocols is no answer)
            return response
        try:
            message = await self._error_message(response, deadline)
        finally:
            response.close()
        raise UpstreamStatusError(
            response.status, self.redact(message), retry_after=retry_after(response)
        )

    async def get_json(self, upstream: UpstreamConfig, path: str, timeout_s: float) -> Any:
        """GET a small JSON document (``/models``); errors mapped like :meth:`post`'s."""
        headers = self._headers(upstream, "", {})
        what = f"upstream {upstream.name!r}: {path}"
        with map_transport_errors(UpstreamConnectError, what, redact=self.redact):
            async with (
                asyncio.timeout(timeout_s),
                self._session().get(f"{upstream.base_url}{path}", headers=headers) as response,
            ):
                if response.status >= 300:
                    message = await self._error_message(response)
                    raise UpstreamStatusError(response.status, self.redact(message))
                raw = await response.content.read(_ERROR_BODY_LIMIT * 64)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamConnectError(self.redact(f"{what}: not JSON ({exc})")) from exc

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise RuntimeError("the upstream session is opened when the app starts")
        return self.session

    @staticmethod
    async def _error_message(
        response: aiohttp.ClientResponse, deadline: float | None = None
    ) -> str:
        try:  # (a TimeoutError is an OSError: mapped too)
            with map_transport_errors(UpstreamStreamError, "error body"):
                async with asyncio.timeout_at(deadline):
                    raw = await response.content.read(_ERROR_BODY_LIMIT)
        except UpstreamStreamError:
            raw = b""
        return _message_in(raw, response.reason)

    async def post_stream(
        self,
        upstream: UpstreamConfig,
        path: str,
        body: dict[str, Any],
        *,
        request_id: str,
        client_headers: Mapping[str, str],
        timeout_s: float | None,
        clock: Clock,
    ) -> StampedConnection:
        """:meth:`post` for a streamed answer, over a stamped connection (no pooling).

        Its reads carry their arrival stamps (the kernel's where the platform gives them,
        docs/bench.md#stamping), so the ``gateway-upstream`` timeline is when each event
        reached the gateway, and downstream minus upstream is the gateway's own latency.
        Errors are mapped as :meth:`post` maps them.
        """
        name = upstream.name
        headers = self._headers(upstream, request_id, client_headers, path)
        conn: StampedConnection | None = None
        deadline = _deadline(timeout_s)
        try:
            async with asyncio.timeout_at(deadline):
                conn = await connection_type().open(
                    Target.from_url(f"{upstream.base_url}{path}"),
                    clock,
                    self.stamps,
                    connect_timeout_s=upstream.timeouts.connect / 1e9,
                    read_timeout_s=None,  # stalls are the watchdog's to judge, on tokens
                )
                await conn.send("POST", headers, orjson.dumps(body))
                head = await conn.head()
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise UpstreamTimeoutError(
                f"upstream {name!r} sent no response headers in time"
            ) from None
        except (UpstreamConnectError, UpstreamStreamError, ProtocolError) as exc:
            if conn is not None:
                conn.close()
            raise UpstreamConnectError(
                self.redact(f"cannot reach upstream {name!r}: {exc}")
            ) from exc
        except BaseException:
            # Cancelled (the client left while the engine queued or prefilled): the
            # connection is closed here, or the engine goes on generating for nobody.
            if conn is not None:
                conn.close()
            raise
        if 200 <= head.status < 300:  # (a 101 that switched protocols is no answer)
            return conn
        try:
            async with asyncio.timeout_at(deadline):  # (the head's budget, as in post)
                raw = await conn.read_body(_ERROR_BODY_LIMIT)
        except (UpstreamStreamError, ProtocolError, TimeoutError):
            raw = b""
        finally:
            conn.close()
        raise UpstreamStatusError(
            head.status,
            self.redact(_message_in(raw, head.reason)),
            retry_after=safe_header(head.headers.get("retry-after"), _RETRY_AFTER),
        )


def _deadline(timeout_s: float | None) -> float | None:
    """The loop's instant ``timeout_s`` from now (None: no bound)."""
    return None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s


def _message_in(raw: bytes, reason: str | None) -> str:
    """The upstream's own message in an error body (JSON or text)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        text = raw.decode("utf-8", "replace").strip()
        return text or (reason or "no message")
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return raw.decode("utf-8", "replace")[:500]


async def read_whole(
    response: aiohttp.ClientResponse, name: str, timeout_s: float, *, limit: int
) -> bytes:
    """The whole body of a non-streaming response, at most ``limit`` bytes.

    A broken or late body is an :class:`UpstreamStreamError`; one larger than ``limit`` a
    :class:`ResponseTooLargeError`, raised as soon as it is known (from ``Content-Length``
    before reading, else once the limit is passed), so memory stays bounded.
    """
    too_large = ResponseTooLargeError(
        f"upstream {name!r} answered with more than limits.max_response_bytes ({limit} bytes)"
    )
    declared = response.content_length
    if declared is not None and declared > limit:
        raise too_large
    parts: list[bytes] = []
    size = 0
    with map_transport_errors(
        UpstreamStreamError,
        f"upstream {name!r} broke off its response",
        timeout=lambda _: UpstreamStreamError(
            f"upstream {name!r} did not finish its response in time"
        ),
    ):
        async with asyncio.timeout(timeout_s):
            while data := await response.content.readany():
                size += len(data)
                if size > limit:
                    raise too_large
                parts.append(data)
    return b"".join(parts)
