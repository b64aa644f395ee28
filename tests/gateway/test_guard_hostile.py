"""The gateway's guards against a hostile upstream and a hostile client, each case a finding.

The upstream here is a bare asyncio server on loopback (:class:`RawUpstream`): it writes the
bytes a test scripts, with no HTTP library to tidy them, and notes when the gateway closes
its connection, which is how the engine behind it would learn that nobody reads any more.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Self

import orjson
import pytest

from steadystream._scrubbing import MIN_HIDDEN_KEY_CHARS
from steadystream.gateway import GatewayServer, config_from_mapping
from steadystream.gateway.upstreams import UpstreamPool
from tests.support.gateway import chat_body, connect, gateway_config, post, raw_request

pytestmark = pytest.mark.integration

Script = Callable[[asyncio.StreamWriter, bytes], Awaitable[None]]

WAIT_S = 5.0  # the bound of every wait for the other side (a pass takes milliseconds)


class RawUpstream:
    """An asyncio server on 127.0.0.1 in a thread: reads one request per connection, runs
    ``script`` on it, then reads until the gateway closes the connection (``closed``)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.port = 0
        self.requests: list[bytes] = []
        self.got_request = threading.Event()
        self.closed = threading.Event()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            body = await reader.readexactly(length)
            self.requests.append(body)
            self.got_request.set()
            await self.script(writer, body)
            for _ in range(10_000):  # until the gateway closes (bounded: a few KiB at most)
                if not await reader.read(65_536):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.set()
            writer.close()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._ready.wait(WAIT_S):
            raise RuntimeError("the raw upstream did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT_S)


def chunk(content: str | None = None, *, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "lab"}
    return b"data: " + orjson.dumps({**obj, "choices": [choice]}) + b"\n\n"


def sse_answer(*texts: str) -> bytes:
    body = b"".join(chunk(t) for t in texts) + chunk(finish="stop") + b"data: [DONE]\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


def raw(url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "raw", "base_url": url, **extra}


# -- cancellation ---------------------------------------------------------------------------


async def _no_answer(writer: asyncio.StreamWriter, body: bytes) -> None:
    """An engine that queues the request (or prefills a long prompt): no head yet."""


def test_a_client_that_leaves_before_the_upstream_answers_closes_the_upstream() -> None:
    # Finding: while the gateway waited for the upstream's response head, a client that left
    # cancelled the wait but left the upstream connection open: the engine went on to
    # generate the whole answer for nobody (upstreams.py, post_stream).
    with RawUpstream(_no_answer) as up:
        config = gateway_config(
            raw(up.base_url), resume={"enabled": False}, watchdog={"first_token_timeout": "60s"}
        )
        with GatewayServer(config) as gw:
            client = connect(gw.base_url)
            client.sendall(raw_request(gw.base_url, "/chat/completions", chat_body()))
            assert up.got_request.wait(WAIT_S)
            assert not up.closed.is_set()  # the request waits for its head, as it should
            client.close()
            assert up.closed.wait(WAIT_S), "the upstream connection outlived its client"


# -- error answers that never end -----------------------------------------------------------


async def _error_head_only(writer: asyncio.StreamWriter, body: bytes) -> None:
    """A 500 head that promises a body, then nothing."""
    writer.write(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    await writer.drain()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_error_head_whose_body_never_comes_is_passed_on_in_time(stream: bool) -> None:
    # Finding: the error body was read with no bound at all (the head's timeout had ended):
    # the client waited forever, streamed (no keepalive either: nothing was committed) or
    # not, with timeouts.request set (upstreams.py, post and post_stream).
    # The head must come within the same bound as the body (1 s: a busy machine's pause
    # before it is read would otherwise make it a timeout, not the 500 passed on).
    with RawUpstream(_error_head_only) as up:
        config = gateway_config(
            raw(up.base_url, timeouts={"request": "1s"}),
            resume={"enabled": False},
            watchdog={"first_token_timeout": "1s"},
        )
        with GatewayServer(config) as gw:
            answer = post(gw.base_url, "/chat/completions", chat_body(stream=stream), timeout=5)
        assert up.closed.wait(WAIT_S)
    assert answer.status == 500
    error = answer.json()["error"]
    assert error["code"] == "upstream_500"
    assert "Internal Server Error" in error["message"]  # the status's reason: no body came


# -- keys ------------------------------------------------------------------------------------

ANSWER = ("The box is EMPTY; ", "fix x = max(x, 1).")


async def _answer(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(sse_answer(*ANSWER))
    await writer.drain()


@pytest.mark.parametrize("key", ["EMPTY", "x"])
def test_a_placeholder_key_does_not_turn_answers_into_stars(
    key: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Finding: a placeholder key (vLLM's "EMPTY", an "x") was scrubbed like a secret: every
    # "EMPTY", or every letter x, of every answer reached the client as "***"
    # (upstreams.py, UpstreamPool).
    caplog.set_level(logging.WARNING)
    with RawUpstream(_answer) as up:
        config = gateway_config(raw(up.base_url, api_key_env="K"), resume={"enabled": False})
        with GatewayServer(config, env={"K": key}) as gw:
            answer = post(gw.base_url, "/chat/completions", chat_body())
    assert answer.text == "".join(ANSWER)
    assert answer.done
    assert "upstream 'raw': its key is shorter than" in caplog.text


def test_a_real_key_is_still_scrubbed_and_a_short_tenant_key_is_not() -> None:
    cfg = config_from_mapping(
        {
            "upstreams": [{"name": "a", "base_url": "http://h/v1", "api_key_env": "A"}],
            "tenants": [{"name": "t", "api_key_env": ["T"]}],
        }
    )
    secret = "s" * MIN_HIDDEN_KEY_CHARS
    pool = UpstreamPool(cfg, None, {"A": secret, "T": "dev"})
    assert pool.redact(f"key {secret} for dev") == "key *** for dev"
    scrub = pool.byte_scrubber()
    assert scrub is not None
    assert scrub(b"the dev said " + secret.encode()) == b"the dev said ***"
