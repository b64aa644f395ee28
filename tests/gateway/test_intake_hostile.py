"""Hostile client requests at the gateway's intake, and hostile whole answers behind it.

Every bad request gets its documented status and an error in its route's shape naming the
field, never a 500, and nothing of it reaches the upstream; every whole answer the gateway
cannot pass on as the client would read it is refused (a 502) or failed over, and one it
passes on is recorded. The upstream here is a raw socket, so that it can answer what no
HTTP library would (a 101, a gzip body it was not asked for).
"""

from __future__ import annotations

import contextlib
import gzip
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from steadystream.files import read_timelines
from steadystream.gateway import GatewayServer
from steadystream.gateway.recording import TimelineRecorder
from steadystream.gateway.requests import MAX_DEPTH, MOST_COUNT, ApiError, parse_request
from tests.support.gateway import connect, gateway_config, post, read_until, wait_for

pytestmark = pytest.mark.integration

KEY = "sk-intake-secret-0123456789"
ENV = {"UP_KEY": KEY}
MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": MESSAGES}
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
    }
)


def http_answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class RawUpstream:
    """Answers every request on 127.0.0.1 with :attr:`answer`'s bytes, then closes; keeps the
    bodies it got (:attr:`bodies`). ``with`` starts and stops it."""

    def __init__(self, answer: bytes = b"") -> None:
        self.answer = answer or http_answer("200 OK", ANSWER, "Content-Type: application/json")
        self.bodies: list[bytes] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                peer, _ = self._listener.accept()
            except TimeoutError:
                continue
            with peer:
                peer.settimeout(5)
                with contextlib.suppress(OSError):
                    self._one(peer)

    def _one(self, peer: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            if not (chunk := peer.recv(65536)):
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        length = int(found.group(1)) if found else 0
        while len(body) < length and (chunk := peer.recv(65536)):
            body += chunk
        self.bodies.append(body)
        peer.sendall(self.answer)


def entry(server: RawUpstream, name: str = "raw", priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "base_url": server.base_url,
        "api_key_env": "UP_KEY",
        "priority": priority,
    }


@pytest.fixture(scope="module")
def upstream() -> Iterator[RawUpstream]:
    with RawUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: RawUpstream) -> Iterator[GatewayServer]:
    with GatewayServer(gateway_config(entry(upstream)), env=ENV) as gw:
        yield gw


def error_of(body: bytes, path: str) -> tuple[str, str | None]:
    """(message, param) of an error body, checking it is in the path's shape."""
    data = orjson.loads(body)
    if path.startswith("/messages"):
        assert data["type"] == "error"
        assert set(data["error"]) == {"type", "message"}
        return data["error"]["message"], None
    assert set(data["error"]) == {"message", "type", "param", "code"}
    return data["error"]["message"], data["error"]["param"]


# -- nesting: orjson reads 1,024 levels and writes 254 -----------------------------------------


def nested(depth: int) -> bytes:
    """A chat body whose deepest value is ``depth`` arrays and objects down (the body is 1)."""
    inner = depth - 1
    return orjson.dumps(CHAT)[:-1] + b',"x":' + b"[" * inner + b"]" * inner + b"}"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chat/completions", nested(300)),
        ("/completions", b'{"model":"m","prompt":"hi","x":' + b"[" * 300 + b"]" * 300 + b"}"),
        ("/messages", b'{"model":"m","max_tokens":5,"messages":[],"x":' + b"{}" * 0 + b"[" * 300
         + b"]" * 300 + b"}"),
        ("/embeddings", b'{"model":"m","input":' + b"[" * 300 + b"]" * 300 + b"}"),
    ],
)  # fmt: skip
def test_a_body_nested_deeper_than_the_gateway_can_send_on_is_a_400_not_a_500(
    gateway: GatewayServer, upstream: RawUpstream, path: str, body: bytes
) -> None:
    # (it was read, then could not be written upstream: uvicorn's 500, a traceback logged)
    seen = len(upstream.bodies)
    refused = post(gateway.base_url, path, body)
    assert refused.status == 400
    message, _ = error_of(refused.body, path)
    assert f"nests more than {MAX_DEPTH}" in message
    assert len(upstream.bodies) == seen


def test_the_nesting_bound_is_exact_and_a_deep_but_allowed_body_goes_through(
    gateway: GatewayServer, upstream: RawUpstream
) -> None:
    with pytest.raises(ApiError, match="nests more than"):
        parse_request(nested(MAX_DEPTH + 1), "chat")
    assert parse_request(nested(MAX_DEPTH), "chat").body["x"] is not None
    # Many brackets side by side are no depth.
    wide = orjson.dumps({**CHAT, "x": [[{"a": [1]}] for _ in range(5000)]})
    assert parse_request(wide, "chat").model == "m"
    answered = post(gateway.base_url, "/chat/completions", nested(MAX_DEPTH))
    assert answered.status == 200
    assert orjson.loads(upstream.bodies[-1])["model"] == "m"


# -- counts: what a 32-bit field of an engine holds --------------------------------------------

TOO_BIG = [2**32 - 1, 2**63, 2**64 - 1]  # (orjson reads up to 2**64 - 1 as an int)


@pytest.mark.parametrize("value", TOO_BIG)
@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("chat", CHAT, "n"),
        ("chat", CHAT, "max_tokens"),
        ("chat", CHAT, "max_completion_tokens"),
        ("completions", {"model": "m", "prompt": "hi"}, "max_tokens"),
        ("responses", {"model": "m", "input": "hi"}, "max_output_tokens"),
        ("messages", {"model": "m", "messages": MESSAGES}, "max_tokens"),
    ],
)
def test_a_count_past_32_bits_is_refused_naming_its_field(
    route: str, body: dict[str, Any], field: str, value: int
) -> None:
    # llama.cpp reads max_tokens 4294967295 into an int: -1, no limit at all.
    raw = orjson.dumps({**body, "max_tokens": 5})[:-1] + f',"{field}":{value}}}'.encode()
    with pytest.raises(ApiError) as caught:
        parse_request(raw, route)  # type: ignore[arg-type]
    assert caught.value.status == 400
    assert caught.value.param == field
    assert caught.value.message == f"{field}: must be at most {MOST_COUNT}, got {value}"
    # The largest count taken still is.
    fine = orjson.dumps({**body, "max_tokens": 5, field: MOST_COUNT})
    assert parse_request(fine, route).model == "m"  # type: ignore[arg-type]


def test_a_null_n_is_one_choice() -> None:
    request = parse_request(orjson.dumps({**CHAT, "n": None, "max_tokens": None}), "chat")
    assert request.choices == 1
    assert request.max_tokens is None


def test_a_count_past_32_bits_never_reaches_the_upstream(
    gateway: GatewayServer, upstream: RawUpstream
) -> None:
    seen = len(upstream.bodies)
    raw = orjson.dumps(CHAT)[:-1] + b',"max_tokens":18446744073709551615}'
    refused = post(gateway.base_url, "/chat/completions", raw)
    assert refused.status == 400
    assert error_of(refused.body, "/chat/completions")[1] == "max_tokens"
    anthropic = orjson.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 2**32})
    refused = post(gateway.base_url, "/messages", anthropic)
    assert refused.status == 400
    assert error_of(refused.body, "/messages")[0].startswith("max_tokens: must be at most")
    assert len(upstream.bodies) == seen


# -- what the intake already held: pinned ------------------------------------------------------

CHAT_RAW = orjson.dumps(CHAT)


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        (b"", None, "not valid JSON"),
        (b"\xef\xbb\xbf" + CHAT_RAW, None, "not valid JSON"),  # a BOM
        (CHAT_RAW[:-1] + b',"temperature":NaN}', None, "not valid JSON"),
        (CHAT_RAW[:-1] + b',"x":"\\ud800"}', None, "not valid JSON"),  # a lone surrogate
        (b"[" + CHAT_RAW + b"]", None, "must be a JSON object"),
        (b"[" * 5000 + b"]" * 5000, None, "not valid JSON"),  # past orjson's 1,024
        (orjson.dumps({**CHAT, "model": ""}), "model", "model: required"),
        (orjson.dumps({**CHAT, "messages": {"role": "user"}}), "messages", "messages: required"),
        (orjson.dumps({**CHAT, "messages": ["hi"]}), "messages.0", "messages.0: must be"),
        (orjson.dumps({**CHAT, "max_tokens": 0}), "max_tokens", "max_tokens: must be"),
        (orjson.dumps({**CHAT, "max_tokens": -1}), "max_tokens", "max_tokens: must be"),
        (orjson.dumps({**CHAT, "max_tokens": 5.0}), "max_tokens", "max_tokens: must be"),
        (orjson.dumps({**CHAT, "max_tokens": "5"}), "max_tokens", "max_tokens: must be"),
        (CHAT_RAW[:-1] + b',"max_tokens":1180591620717411303424}', "max_tokens", "max_tokens"),
        (orjson.dumps({**CHAT, "stream_options": []}), "stream_options", "stream_options:"),
    ],
)
def test_a_bad_body_is_a_400_naming_its_field_and_is_not_sent_on(
    gateway: GatewayServer,
    upstream: RawUpstream,
    body: bytes,
    param: str | None,
    says: str,
) -> None:
    seen = len(upstream.bodies)
    refused = post(gateway.base_url, "/chat/completions", body)
    assert refused.status == 400
    message, named = error_of(refused.body, "/chat/completions")
    assert named == param
    assert says in message
    assert len(upstream.bodies) == seen


def test_duplicate_keys_go_upstream_as_the_gateway_checked_them(
    gateway: GatewayServer, upstream: RawUpstream
) -> None:
    # The last of each name counts, and the upstream gets only that one: never a body that
    # another JSON parser (the first key wins) would read as another request.
    body = b'{"model":"m","max_tokens":0,"max_tokens":7,' + CHAT_RAW[1:]
    answered = post(gateway.base_url, "/chat/completions", body)
    assert answered.status == 200
    sent = upstream.bodies[-1]
    assert sent.count(b'"max_tokens"') == 1
    assert orjson.loads(sent)["max_tokens"] == 7


def test_a_chunked_request_body_with_expect_continue_is_read_whole(
    gateway: GatewayServer, upstream: RawUpstream
) -> None:
    url = gateway.base_url
    sock = connect(url)
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        )
        assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100")
        half = len(CHAT_RAW) // 2
        for part in (CHAT_RAW[:half], CHAT_RAW[half:]):
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        sock.sendall(b"0\r\n\r\n")
        answer = read_until(sock, b"}]}")
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert orjson.loads(upstream.bodies[-1]) == CHAT


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "GET"])
def test_other_methods_on_the_api_routes_are_405_in_json(
    gateway: GatewayServer, method: str
) -> None:
    sock = connect(gateway.base_url)
    try:
        sock.sendall(
            f"{method} /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        answer = read_until(sock, b"\x00")  # (to the close)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405")
    assert b"\r\nallow: post\r\n" in head.lower()
    if method == "HEAD":
        assert body == b""
    else:
        assert orjson.loads(body)["error"]["code"] == "method_not_allowed"


# -- whole answers the gateway cannot pass on --------------------------------------------------


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_an_upstream_101_is_a_502_not_passed_on(path: str) -> None:
    # (it went to the client as "101 Switching Protocols" with an empty body)
    switched = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    with (
        RawUpstream(switched + ANSWER) as raw,
        GatewayServer(gateway_config(entry(raw)), env=ENV) as gw,
    ):
        refused = post(gw.base_url, path, {**CHAT, "input": "hi"})
    assert refused.status == 502
    data = orjson.loads(refused.body)
    assert data["error"]["code"] == "upstream_101"
    assert "101" in data["error"]["message"]


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_a_gzip_answer_is_not_passed_on_and_the_next_upstream_answers(path: str) -> None:
    # The gateway asks for no content coding; a gzip answer went to the client as plain
    # JSON, without its Content-Encoding, and the key it quoted was not scrubbed.
    quoted = gzip.compress(orjson.dumps({"note": f"you sent {KEY}"}))
    packed = http_answer(
        "200 OK", quoted, "Content-Type: application/json", "Content-Encoding: gzip"
    )
    body = {**CHAT, "input": "hi"}
    with RawUpstream(packed) as bad, RawUpstream() as good:
        config = gateway_config(entry(bad, "bad", 0), entry(good, "good", 1))
        with GatewayServer(config, env=ENV) as gw:
            answered = post(gw.base_url, path, body)
        with GatewayServer(gateway_config(entry(bad, "bad")), env=ENV) as gw:
            refused = post(gw.base_url, path, body)
    assert answered.status == 200
    assert answered.body == ANSWER
    assert (len(bad.bodies), len(good.bodies)) == (2, 1)
    assert refused.status == 502
    assert quoted not in refused.body
    assert "content coding" in orjson.loads(refused.body)["error"]["message"]


def test_a_whole_answer_with_counts_no_timeline_holds_is_still_recorded(tmp_path: Path) -> None:
    # A usage of 2**64 - 1, a bool or a negative number: the record was refused by the
    # writer ("could not record the stream", a traceback) and the request went unrecorded.
    usage = (
        b'{"prompt_tokens":3,"completion_tokens":18446744073709551615,"total_tokens":true,"x":-2}'
    )
    answer = ANSWER[:-1] + b',"usage":' + usage + b"}"
    recorder = TimelineRecorder(tmp_path)
    try:
        with (
            RawUpstream(http_answer("200 OK", answer, "Content-Type: application/json")) as raw,
            GatewayServer(gateway_config(entry(raw)), env=ENV, recorder=recorder) as gw,
        ):
            answered = post(gw.base_url, "/chat/completions", CHAT)
            assert answered.status == 200

            def recorded() -> list[Any] | None:  # (both edges: they may land one by one)
                found = [t for f in recorder.files for t in read_timelines(f).timelines]
                return found if len(found) >= 2 else None

            timelines = wait_for(recorded, what="the record")
    finally:
        recorder.close()
    assert len(timelines) == 2  # both edges
    assert all(t.usage == {"prompt_tokens": 3} for t in timelines)
