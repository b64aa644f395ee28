"""Resume against hostile or careless clients, with the memory store: bounds on streams and
keys, hostile ids in headers and paths, a reader that comes back and never reads, tenants
that pick the same ``Idempotency-Key``."""

from __future__ import annotations

import socket

import orjson
import pytest
from prometheus_client import CollectorRegistry

from steadystream._clock import NS_PER_S, FakeClock
from steadystream.gateway import GatewayServer
from steadystream.gateway.config import ResumeConfig
from steadystream.gateway.export import GatewayMetrics
from steadystream.gateway.resume.hub import StreamHub, idempotency_key
from steadystream.gateway.resume.log import StreamGone
from steadystream.gateway.resume.store import Claim
from steadystream.lab import LabServer, scenario_from_mapping
from tests.support.gateway import (
    chat_body,
    connect,
    finished_truth,
    gateway_config,
    read_until,
    upstream,
    wait_for,
)
from tests.support.resume import read_stream

CHAT = "/v1/chat/completions"


def event(text: str = "x") -> bytes:
    return b"data: %s\n\n" % text.encode()


@pytest.mark.asyncio
async def test_ten_thousand_keys_and_streams_keep_memory_bounded() -> None:
    clock = FakeClock()
    metrics = GatewayMetrics(CollectorRegistry())
    hub = StreamHub(ResumeConfig(max_streams=100), clock, metrics)
    ids = []
    for n in range(10_000):
        stream_id = hub.new_id()
        ids.append(stream_id)
        key = idempotency_key("t", "/v1/chat/completions", f"key-{n}")
        assert await hub.claim(key, Claim(stream_id, "body")) is None
        live = hub.open("chat", "t", None, stream_id)
        live.tee.stamp(event(str(n)))
        live.ended("complete")
        await clock.advance(NS_PER_S // 1000)
    local = hub.local
    assert len(local) == 100
    assert len(local._ended) == 100
    # keys go with their streams, or with the streams remembered as let go (as many)
    assert len(local._claims) == len(local._claims_of) == 200
    assert len(local._gone) == 100
    assert len(hub.live) == 0
    # a stream let go lately to make room: a resume is told so; long ago: unknown
    for stream_id, reason in ((ids[-150], "evicted"), (ids[0], "unknown")):
        with pytest.raises(StreamGone) as gone:
            await anext(local.follow(stream_id, 0, NS_PER_S))
        assert gone.value.reason == reason
    assert await hub.info(ids[-150]) is not None
    assert await hub.info(ids[0]) is None


@pytest.mark.asyncio
async def test_past_max_streams_while_all_run_the_store_comes_back_to_its_bound() -> None:
    clock = FakeClock()
    hub = StreamHub(ResumeConfig(max_streams=10), clock, GatewayMetrics(CollectorRegistry()))
    running = [hub.open("chat", "t") for _ in range(30)]  # 20 of them not kept
    for live in running:
        live.ended("complete")
    for _ in range(5):
        hub.open("chat", "t").ended("complete")
    assert len(hub.local) <= 10


def test_a_stream_let_go_for_room_gets_a_410_naming_it() -> None:
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), resume={"max_streams": 2})
        with GatewayServer(config) as gw:
            reads = [read_stream(gw.url, "POST", CHAT, chat_body(3)) for _ in range(3)]
            oldest = read_stream(gw.url, "GET", f"/v1/streams/{reads[0].stream_id}")
            newest = read_stream(gw.url, "GET", f"/v1/streams/{reads[2].stream_id}")
    assert oldest.status == 410
    assert orjson.loads(oldest.body)["error"]["code"] == "stream_evicted"
    assert "resume.max_streams" in orjson.loads(oldest.body)["error"]["message"]
    assert newest.status == 200
    assert newest.ids == reads[2].ids


HOSTILE_IDS = {
    "negative": "-1",
    "signed": "+5",
    "non-numeric": "abc",
    "too many digits": "9" * 19,
    "ten kB": "7" * 10_000,
    "a superscript digit": "\xb2",
    "markup": "<script>alert(1)</script>",
}


@pytest.mark.integration
def test_hostile_last_event_ids_get_a_400_naming_the_header() -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        done = read_stream(gw.url, "POST", CHAT, chat_body(4))
        path = f"/v1/streams/{done.stream_id}"
        answers = {
            name: _get_raw(gw.url, path, {"Last-Event-ID": value})
            for name, value in HOSTILE_IDS.items()
        }
        past_the_end = read_stream(gw.url, "GET", path, None, {"Last-Event-ID": "9" * 18})
        running = read_stream(gw.url, "POST", CHAT, chat_body(400), leave_after=2)
        ahead = read_stream(
            gw.url, "GET", f"/v1/streams/{running.stream_id}", None, {"Last-Event-ID": "1000"}
        )
        read_stream(gw.url, "DELETE", f"/v1/streams/{running.stream_id}")
    for name, (status, body) in answers.items():
        assert status == 400, name
        error = orjson.loads(body)["error"]
        assert error["param"] == "Last-Event-ID", name
        assert len(body) < 400, name  # the value is not echoed whole
        assert b"<script>" not in body, name
    # an id this stream never sent: a 410 at once, not a wait for events that never come
    assert past_the_end.status == 410
    assert orjson.loads(past_the_end.body)["error"]["code"] == "stream_unknown"
    assert ahead.status == 410
    assert orjson.loads(ahead.body)["error"]["code"] == "stream_unknown"


@pytest.mark.integration
@pytest.mark.parametrize(
    "path",
    [
        "/v1/streams/" + "A" * 10_000,
        "/v1/streams/%3Cscript%3Ealert(1)%3C%5Cscript%3E",
        "/v1/streams/strm_..%5C..%5Cetc",
        "/v1/streams/ss:k:x",
        "/v1/responses/" + "r" * 10_000 + "?stream=true",
        "/v1/responses/%3Cscript%3E?stream=true",
    ],
    ids=["ten-kB", "markup", "dots", "redis-key", "response-ten-kB", "response-markup"],
)
def test_a_hostile_stream_id_in_the_path_is_unknown_and_not_echoed(path: str) -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        status, body = _get_raw(gw.url, path, {})
    assert status == 410
    assert orjson.loads(body)["error"]["code"] == "stream_unknown"
    assert len(body) < 400
    assert b"<script>" not in body
    assert b"AAAAAAAAAA" not in body


@pytest.mark.integration
def test_a_reader_who_came_back_and_reads_nothing_is_cut_after_stuck_timeout() -> None:
    # A lab that writes a token a millisecond, so the follower's buffers fill quickly.
    fast = scenario_from_mapping(
        {"scheduler": {"step_base_ms": 1.0}, "output": {"min_tokens": 6000, "max_tokens": 6000}}
    )
    with LabServer(fast) as lab:
        config = gateway_config(
            upstream(lab, "lab"),
            limits={"stuck_timeout": "300ms"},
            watchdog={"stall_timeout": "2s"},
        )
        with GatewayServer(config) as gw:
            first = read_stream(
                gw.url, "POST", CHAT, chat_body(6000), {"X-Request-Id": "f-1"}, leave_after=3
            )
            hub = gw.state.resume
            assert hub is not None
            sock = connect(gw.url, rcvbuf=4096)
            try:
                sock.sendall(_get_request(gw.url, f"/v1/streams/{first.stream_id}", {}))
                assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 200")
                # ...and read nothing more: the reader is let go, its connection closed
                live = hub.live.get(first.stream_id)
                if live is not None:
                    wait_for(lambda: live.readers == 0 or None, what="the follower to be cut")
                rest = _drain(sock)
            finally:
                sock.close()
            truth = finished_truth(lab, "f-1")
    assert not rest.endswith(b"0\r\n\r\n")  # cut, not a response that looks whole
    assert truth.tokens_generated == 6000  # the generation itself was not the one cut


def _get_request(base: str, path: str, headers: dict[str, str]) -> bytes:
    host = base.removeprefix("http://")
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _get_raw(base: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """A GET sent as raw bytes (headers latin-1, as a hostile client may), its status and
    body."""
    sock = connect(base)
    try:
        sock.sendall(_get_request(base, path, {**headers, "Connection": "close"}))
        data = _drain(sock)
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _drain(sock: socket.socket) -> bytes:
    """Everything until the server closes (or resets) the connection."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
