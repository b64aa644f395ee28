"""Calling upstreams: request bodies (continuations included), one aiohttp session, mapped errors.

aiohttp's exceptions never leave this module: a connection that cannot be made is an
:class:`~steadystream.UpstreamConnectError`, an HTTP error status an
:class:`~steadystream.UpstreamStatusError` carrying the upstream's own message, a stream that
breaks an :class:`~steadystream.UpstreamStreamError`. Upstream keys come from the environment,
are sent only in the ``Authorization`` header, and are scrubbed from every message that could
reach a log, a recording, a metric or a client (:meth:`UpstreamPool.redact`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from steadystream._exceptions import (
    ConfigError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamStreamError,
    UpstreamTimeoutError,
)
from steadystream.gateway.config import GatewayConfig, UpstreamConfig
from steadystream.gateway.failover import Action, Progress
from steadystream.gateway.requests import ProxyRequest

__all__ = ["UpstreamPool", "UpstreamTimeoutError", "build_body", "open_session", "read_whole"]

_ERROR_BODY_LIMIT = 4096
_READ_BUFSIZE = 1 << 16  # per response: part of the per-stream memory bound


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


def build_body(
    request: ProxyRequest,
    upstream: UpstreamConfig,
    action: Action = Action.RETRY,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The body to send ``upstream`` for a first try, a retry, a continuation or a regeneration.

    A continuation never re-sends committed text to the client: it asks the upstream to go
    on *from* it. The token limit shrinks by what was already committed, so the whole answer
    stays within what the client asked for.
    """
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

    def redact(self, text: str) -> str:
        """``text`` with every upstream key replaced by ``***``."""
        for key in self._keys.values():
            if key in text:
                text = text.replace(key, "***")
        return text

    def _headers(
        self, upstream: UpstreamConfig, request_id: str, client_headers: Mapping[str, str]
    ) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if upstream.request_id_header is not None and request_id:
            headers[upstream.request_id_header] = request_id
        for name in upstream.forward_headers:
            value = client_headers.get(name)
            if value is not None:
                headers[name] = value
        headers.update(upstream.headers)
        key = self._keys.get(upstream.name)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
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

        ``timeout_s`` bounds the wait for the response headers. On an error status the body
        is read (up to a few KiB) for the upstream's own message and the response closed.
        """
        session = self._session()
        url = f"{upstream.base_url}{path}"
        headers = self._headers(upstream, request_id, client_headers)
        timeout = aiohttp.ClientTimeout(total=None, connect=upstream.timeouts.connect / 1e9)
        try:
            async with asyncio.timeout(timeout_s):
                response = await session.post(
                    url, data=orjson.dumps(body), headers=headers, timeout=timeout
                )
        except TimeoutError as exc:
            raise UpstreamTimeoutError(
                f"upstream {upstream.name!r} sent no response headers in time"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamConnectError(
                self.redact(f"cannot reach upstream {upstream.name!r}: {exc}")
            ) from exc
        if response.status < 300:
            return response
        try:
            message = await self._error_message(response)
        finally:
            response.close()
        raise UpstreamStatusError(response.status, self.redact(message))

    async def get_json(self, upstream: UpstreamConfig, path: str, timeout_s: float) -> Any:
        """GET a small JSON document (``/models``); errors mapped like :meth:`post`'s."""
        headers = self._headers(upstream, "", {})
        try:
            async with (
                asyncio.timeout(timeout_s),
                self._session().get(f"{upstream.base_url}{path}", headers=headers) as response,
            ):
                if response.status >= 300:
                    message = await self._error_message(response)
                    raise UpstreamStatusError(response.status, self.redact(message))
                return orjson.loads(await response.read())
        except UpstreamError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError, orjson.JSONDecodeError) as exc:
            raise UpstreamConnectError(
                self.redact(f"upstream {upstream.name!r}: {path}: {exc}")
            ) from exc

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise RuntimeError("the upstream session is opened when the app starts")
        return self.session

    @staticmethod
    async def _error_message(response: aiohttp.ClientResponse) -> str:
        try:
            raw = await response.content.read(_ERROR_BODY_LIMIT)
        except (aiohttp.ClientError, OSError):
            raw = b""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            text = raw.decode("utf-8", "replace").strip()
            return text or (response.reason or "no message")
        if isinstance(data, dict):
            error = data.get("error", data)
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])
            if isinstance(error, str):
                return error
            if isinstance(data.get("message"), str):
                return str(data["message"])
        return raw.decode("utf-8", "replace")[:500]


async def read_whole(response: aiohttp.ClientResponse, name: str, timeout_s: float) -> bytes:
    """The whole body of a non-streaming response; a broken or late one is an
    :class:`UpstreamStreamError`."""
    try:
        async with asyncio.timeout(timeout_s):
            return await response.read()
    except TimeoutError as exc:
        raise UpstreamStreamError(f"upstream {name!r} did not finish its response in time") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise UpstreamStreamError(f"upstream {name!r} broke off its response: {exc}") from exc
