"""HTTP/1.0 clients: a stream goes out close-delimited, never in chunks they cannot read.

HTTP/1.0 has no chunked coding. uvicorn's httptools protocol chunked every response without
Content-Length whatever the request's version, and so did the gateway's own fast paths (the
express lane and the native lane write chunk frames to the transport themselves): an
HTTP/1.0 client read the chunk sizes as data. Each stream runs on both lanes.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from steadystream.protocol import SseDecoder, SseEvent, is_done, parse_chunk
from tests.support.gateway import chat_body, gateway_config, upstream

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer("steady") as server:
        yield server


def ask_http10(port: int, body: dict[str, Any]) -> tuple[bytes, dict[str, str], bytes]:
    """POST as an HTTP/1.0 client does, reading until the server closes: the status line,
    the headers, and the body."""
    data = orjson.dumps(body)
    head = (
        "POST /v1/chat/completions HTTP/1.0\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + data)
        while chunk := sock.recv(65536):  # to the close (each recv has the socket's timeout)
            received += chunk
    raw_head, _, payload = bytes(received).partition(b"\r\n\r\n")
    status, *lines = raw_head.split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, payload


@pytest.mark.parametrize("lane", ["1", "0"], ids=["native-lane", "python-lane"])
def test_a_stream_to_an_http10_client_is_close_delimited(
    lab: LabServer, lane: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEADYSTREAM_NATIVE", lane)
    with GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        status, headers, body = ask_http10(gw.port, chat_body(12))
    assert status.startswith(b"HTTP/1.1 200")  # a server says its own version (RFC 9110 2.5)
    assert "transfer-encoding" not in headers
    assert "content-length" not in headers
    assert headers["connection"] == "close"
    # What came is the event stream itself: no chunk-size line, no chunk-ending CRLF.
    lines = [line for line in body.split(b"\n") if line]
    assert lines
    assert all(line.startswith((b"data: ", b"id: ", b":")) for line in lines), lines[:3]
    events = [item.data for item in SseDecoder().feed(body) if isinstance(item, SseEvent)]
    assert is_done(events[-1])
    assert "".join(parse_chunk(data).text for data in events[:-1])


def test_an_answer_of_known_length_to_an_http10_client_keeps_content_length(
    lab: LabServer,
) -> None:
    with GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        status, headers, body = ask_http10(gw.port, chat_body(5, stream=False))
    assert status.startswith(b"HTTP/1.1 200")
    assert "transfer-encoding" not in headers
    assert int(headers["content-length"]) == len(body)
    assert orjson.loads(body)["choices"][0]["message"]["content"]
