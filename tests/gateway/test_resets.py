"""An upstream's reset reaches the client in-band at once, whatever read the bytes before it.

Issue 24, item 1: an upstream that sends a few events, then ~600 KB (one endless event or
thousands of small ones), then resets the connection. The Python lane under uvloop (every
install without a compiler, and every TLS upstream) left the bytes behind the first read
and the reset unread, so the client sat on an open 200 until the stall timeout and the
recording called it a stall. Here the stall timeout is 30 s: an answer that ends in a reset
error, not a stall, came without waiting for it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from pathlib import Path

import orjson
import pytest

from steadystream import Outcome
from steadystream.gateway import GatewayServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, get, post
from tests.support.scripted import ScriptedServer, read_request
from tests.support.tls import self_signed

pytestmark = pytest.mark.integration


def _event(delta: dict[str, str]) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "lab"}
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]  # type: ignore[assignment]
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
_WORDS = ("a ", "b ", "c ")
_START = _event({"role": "assistant"}) + b"".join(_event({"content": w}) for w in _WORDS)
_FLOODS = {
    "endless-event": b"data: " + b"y" * 600_000,
    "many-events": _event({"content": "x"}) * 3_000,
}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(folder)
    bundle = folder / "bundle.pem"
    bundle.write_bytes(cert.read_bytes() + key.read_bytes())
    return bundle


@pytest.fixture(params=["uvloop", "asyncio"])
def loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "asyncio":  # the gateway's thread runs asyncio's own loop
        monkeypatch.setattr("steadystream._serving.new_event_loop", asyncio.new_event_loop)
    return str(request.param)


@pytest.mark.parametrize("flood", sorted(_FLOODS))
@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
def test_a_reset_behind_a_flood_ends_the_answer_in_band(
    loop: str,
    secure: bool,
    flood: str,
    certificate: Path,
    sink: MemorySink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certificate)

    def flood_then_reset(peer: socket.socket) -> None:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        stream: socket.socket | ssl.SSLSocket = peer
        if secure:
            stream = server_context.wrap_socket(peer, server_side=True)
        read_request(stream)
        stream.sendall(_HEAD + _START)
        time.sleep(0.05)  # the gateway is relaying when the flood comes
        stream.sendall(_FLOODS[flood])
        stream.close()  # a reset: SO_LINGER 0

    if secure:  # the gateway trusts the test's certificate as it would a private CA's
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    upstream = ScriptedServer(flood_then_reset, read_request=False)
    scheme = "https" if secure else "http"
    config = gateway_config(
        {"name": "only", "base_url": f"{scheme}://127.0.0.1:{upstream.port}/v1"},
        watchdog={"first_token_timeout": "30s", "stall_timeout": "30s"},
    )
    try:
        with GatewayServer(config, recorder=sink) as gw:
            streamed = post(gw.base_url, "/chat/completions", chat_body(), timeout=10)
            _, metrics = get(gw.url, "/metrics")
    finally:
        upstream.close()
    assert streamed.status == 200
    assert streamed.text.startswith("a b c ")
    assert streamed.error is not None
    assert "reset" in streamed.error, streamed.error
    assert streamed.done  # the in-band error, then [DONE]: never a silent end
    _, down = sink.edges(streamed.headers["x-request-id"])
    assert down.outcome is Outcome.ERROR
    assert down.meta["attempts"][0]["failure"] == "reset"
    assert b"steadystream_stalls_total{" not in metrics
