"""What the gateway logs and records when clients and upstreams are hostile: every string from
outside is one line of valid text, cut when long, and no key (upstream or gateway) is in it.
A recorded answer's text (``recording.keep_text``) is the answer's own: only keys hidden."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from steadystream._types import Where
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, post, upstream
from tests.support.scripted import ScriptedServer

pytestmark = pytest.mark.integration

SECRET = "sk-upstream-very-secret-0042"
GATEWAY_KEY = "gw-tenant-secret-9999"
ENV = {"UPSTREAM_KEY": SECRET, "WEB_KEY": GATEWAY_KEY}
AUTH = {"Authorization": f"Bearer {GATEWAY_KEY}"}
TENANTS = [{"name": "web", "api_key_env": ["WEB_KEY"]}]
# What no log line may hold: line breaks and every other C0 or C1 control (a tab aside), DEL,
# the Unicode line and paragraph separators, and lone surrogates (no UTF-8 writer takes one).
_NOT_IN_A_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _answer_with(response: bytes) -> ScriptedServer:
    """An upstream that reads one whole request and answers ``response``'s bytes."""

    def script(peer: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += peer.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        found = re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head)
        while found is not None and len(body) < int(found.group(1)):
            body += peer.recv(65536)
        peer.sendall(response)
        peer.shutdown(socket.SHUT_WR)

    return ScriptedServer(script, read_request=False)


def _raw(status_line: bytes, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (status_line, content_type, len(body), body)
    )


def _chunk(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: " + orjson.dumps({**chunk, "choices": [choice]}) + b"\n\n"


def _keyed(server: ScriptedServer, name: str, **extra: Any) -> dict[str, Any]:
    base_url = f"http://127.0.0.1:{server.port}/v1"
    return {"name": name, "base_url": base_url, "api_key_env": "UPSTREAM_KEY", **extra}


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The gateway's log messages, each checked: one line of valid text, no key in it."""
    said = [r.getMessage() for r in caplog.records if r.name.startswith("steadystream")]
    for message in said:
        assert _NOT_IN_A_LINE.search(message) is None, repr(message)
        assert SECRET[:8] not in message, message
        assert GATEWAY_KEY[:8] not in message, message
        message.encode()  # valid text: a log file takes it
    return said


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG, logger="steadystream")
    yield caplog
    _said(caplog)


def test_a_status_line_that_is_not_utf8_is_refused_cleanly_and_logged_as_text(
    sink: MemorySink, logged: pytest.LogCaptureFixture
) -> None:
    """A reason phrase of raw bytes (aiohttp reads it ``surrogateescape``) with an escape, a
    C1 byte and the key: the refusal was a 500 of the gateway's own (orjson refused the
    message's lone surrogate), and the message could not be written to a UTF-8 log file."""
    reason = b"Down \x1b[31m\x85\xff " + SECRET.encode()
    server = _answer_with(_raw(b"503 " + reason, b""))
    config = gateway_config(_keyed(server, "raw"), tenants=TENANTS)
    try:
        with GatewayServer(config, env=ENV, recorder=sink) as gw:
            answer = post(gw.base_url, "/chat/completions", chat_body(stream=False), AUTH)
    finally:
        server.close()
    assert answer.status == 503, answer.body
    message = answer.json()["error"]["message"]
    assert message == "HTTP 503: Down  [31m\ufffd\ufffd ***"
    _, down = sink.edges(answer.headers["x-request-id"])
    assert down.error == message
    assert any("refused: HTTP 503: Down  [31m" in m for m in _said(logged))


_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
_ESCAPES = r"\n\u001b[2J\u0085\u2028INFO forged "  # (JSON escapes, in an error event)


@pytest.mark.parametrize(
    "response",
    [
        _raw(b"500 Oops", f"<html>\n\r\x1b[31m{SECRET}</html>".encode(), b"text/html"),
        _SSE_HEAD + _chunk("hi ") + f'data: {{"error": "{_ESCAPES}{SECRET}"}}\n\n'.encode(),
        _SSE_HEAD + b"data: {not json \x1b[2J\xc2\x85" + SECRET.encode() + b"\n\n",
    ],
    ids=["html-error", "error-event", "garbage"],
)
def test_an_upstreams_words_are_logged_and_recorded_as_one_line_without_keys(
    response: bytes, sink: MemorySink, logged: pytest.LogCaptureFixture
) -> None:
    server = _answer_with(response)
    config = gateway_config(_keyed(server, "raw"), tenants=TENANTS)
    try:
        with GatewayServer(config, env=ENV, recorder=sink) as gw:
            answer = post(gw.base_url, "/chat/completions", chat_body(3), AUTH)
    finally:
        server.close()
    assert SECRET[:8].encode() not in answer.body
    assert _said(logged)  # the failure was logged
    for edge in sink.edges(answer.headers["x-request-id"]):
        assert edge.error is not None
        assert _NOT_IN_A_LINE.search(edge.error) is None
        assert SECRET[:8] not in orjson.dumps([edge.error, edge.meta]).decode()


def test_recorded_texts_keep_their_line_breaks_and_length_and_hide_keys(
    sink: MemorySink, logged: pytest.LogCaptureFixture
) -> None:
    """``keep_text`` recorded each text through the log-line redaction: a streamed answer's
    line breaks became spaces, and a whole answer past 4096 characters was cut."""
    streamed = _answer_with(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        + _chunk("# Title\n\n")
        + _chunk(f"- key {SECRET}\n")
        + _chunk("", "stop")
        + b"data: [DONE]\n\n"
    )
    long_text = "para\n\n" + "z" * 5000
    whole_answer = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": long_text},
                "finish_reason": "stop",
            }
        ],
    }
    whole = _answer_with(_raw(b"200 OK", orjson.dumps(whole_answer)))
    config = gateway_config(
        _keyed(streamed, "streamed", models=["s"]),
        _keyed(whole, "whole", models=["w"]),
        tenants=TENANTS,
        recording={"keep_text": True},
    )
    try:
        with GatewayServer(config, env=ENV, recorder=sink) as gw:
            first = post(gw.base_url, "/chat/completions", chat_body(model="s"), AUTH)
            second = post(
                gw.base_url, "/chat/completions", chat_body(model="w", stream=False), AUTH
            )
    finally:
        streamed.close()
        whole.close()
    assert first.text == "# Title\n\n- key ***\n"
    for edge in sink.edges(first.headers["x-request-id"]):
        assert [t for t in edge.texts or [] if t] == ["# Title\n\n", "- key ***\n"]
    assert second.status == 200
    for edge in sink.edges(second.headers["x-request-id"]):
        assert [t for t in edge.texts or [] if t] == [long_text]


@pytest.mark.parametrize("key", [GATEWAY_KEY, SECRET], ids=["gateway-key", "upstream-key"])
def test_a_request_id_that_holds_a_key_is_replaced(
    key: str, sink: MemorySink, logged: pytest.LogCaptureFixture
) -> None:
    """A client that sends a key as its ``X-Request-Id`` (a valid id's characters): the id
    went into every log line, the record's stream id, the upstream request and the answer."""
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab", api_key_env="UPSTREAM_KEY"),
            tenants=TENANTS,
            recording={"keep_text": True},
        )
        with GatewayServer(config, env=ENV, recorder=sink) as gw:
            answer = post(
                gw.base_url,
                "/chat/completions",
                chat_body(3, model=f"lab\n\x1b[2J\u2028{SECRET}" + "m" * 100_000),
                {**AUTH, "X-Request-Id": f"req-{key}"},
            )
            served = post(
                gw.base_url, "/chat/completions", chat_body(3), {**AUTH, "X-Request-Id": f"r-{key}"}
            )
    assert answer.status == 404
    assert served.done
    for response in (answer, served):
        request_id = response.headers["x-request-id"]
        assert key[:8] not in request_id
        assert request_id.startswith("gw-")
    recorded = [t.stream_id for t in sink.timelines]
    assert recorded
    assert not any(key[:8] in stream_id for stream_id in recorded)


def test_a_pages_label_names_are_redacted_like_its_values(
    sink: MemorySink, logged: pytest.LogCaptureFixture
) -> None:
    """A glass report's label names went to the record as the page sent them: a key, a line
    break or an escape in one was recorded (the values were scrubbed)."""
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab", api_key_env="UPSTREAM_KEY"),
            tenants=TENANTS,
            glass={"accept": True},
            recording={"enabled": True, "keep_text": True},
        )
        with GatewayServer(config, env=ENV, recorder=sink) as gw:
            answered = post(gw.base_url, "/chat/completions", chat_body(3), AUTH)
            report = {
                "schema": "steadystream.glass/1",
                "stream_id": answered.headers["x-request-id"],
                "labels": {f"k\n\x1b[2J{GATEWAY_KEY}": f"v\n{SECRET}"},
                "arrivals": [[20.0, 1], [40.0, 1]],
                "frames": [[25.0, 2]],
                "texts": ["one\n", f"two {GATEWAY_KEY}"],
            }
            headers = {**AUTH, "X-Steadystream-Glass-Token": answered.headers[_TOKEN]}
            taken = post(gw.url, "/steadystream/glass", report, headers)
    assert taken.status in (200, 202, 204), taken.body
    client = next(t for t in sink.timelines if t.where is Where.CLIENT)
    page = {k: v for k, v in client.labels.items() if k not in ("tenant", "vantage")}
    assert page == {"k [2J***": "v ***"}
    assert client.texts == ["one\n", "two ***"]


_TOKEN = "x-steadystream-glass-token"
