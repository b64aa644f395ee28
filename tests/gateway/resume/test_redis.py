"""The Redis store: two gateway processes share streams; Redis down fails nothing else.

Each test starts its own ``redis-server`` (conftest.py) and stops it by its pid; gateway
processes are started and stopped by theirs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from steadystream._processes import Child, free_port, steadystream_command
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import (
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    get,
    upstream,
    wait_for,
)
from tests.support.resume import RedisServer, read_stream

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"


@contextmanager
def gateway_process(tmp_path: Path, name: str, lab: LabServer, store: str) -> Iterator[str]:
    """A gateway in its own process with the Redis store; its URL."""
    port = free_port()
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"server: {{port: {port}}}\n"
        f"upstreams: [{{name: lab, base_url: '{lab.base_url}'}}]\n"
        f"resume: {{store: '{store}'}}\n"
    )
    url = f"http://127.0.0.1:{port}"
    command = steadystream_command("gateway", "--config", str(config))
    log = tmp_path / name
    # (a busy machine may take a while to import and start it)
    with Child(
        f"gateway {name}", command, health_url=f"{url}/healthz", log=log, start_timeout_s=90
    ):
        yield url


@pytest.mark.slow
def test_a_reader_resumes_through_another_gateway_process(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with (
        LabServer("steady") as lab,
        gateway_process(tmp_path, "a", lab, redis_server.url) as a,
        gateway_process(tmp_path, "b", lab, redis_server.url) as b,
    ):
        first = read_stream(
            a, "POST", CHAT, chat_body(100), {"X-Request-Id": "two-1"}, leave_after=40
        )
        time.sleep(2.0)  # the reader is away; the generation goes on in process a
        rest = read_stream(
            b, "GET", f"/v1/streams/{first.stream_id}", None, {"Last-Event-ID": first.last_id}
        )
        truth = finished_truth(lab, "two-1")
    assert first.ids == list(range(1, 41))
    assert rest.status == 200
    assert first.ids + rest.ids == list(range(1, rest.ids[-1] + 1))  # none twice, none lost
    assert first.text + rest.text == "".join(answer(truth))
    assert truth.tokens_generated == 100  # the upstream saw one request, to its end
    assert truth.finish_reason == "length"


def test_a_repeated_post_on_another_process_joins_and_delete_reaches_the_owner(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    key = {"Idempotency-Key": "k-2"}
    with (
        LabServer("steady") as lab,
        gateway_process(tmp_path, "a", lab, redis_server.url) as a,
        gateway_process(tmp_path, "b", lab, redis_server.url) as b,
    ):
        body = chat_body(30)
        first = read_stream(a, "POST", CHAT, body, {**key, "X-Request-Id": "join-1"}, leave_after=5)
        joined = read_stream(
            b, "POST", CHAT, body,
            {**key, "X-Request-Id": "join-2", "Last-Event-ID": first.last_id},
        )  # fmt: skip
        truth = finished_truth(lab, "join-1")
        long = read_stream(
            a, "POST", CHAT, chat_body(400), {"X-Request-Id": "del-2"}, leave_after=3
        )
        cancelled = read_stream(b, "DELETE", f"/v1/streams/{long.stream_id}")
        long_truth = finished_truth(lab, "del-2")
        second = lab.truth("join-2")
    assert joined.stream_id == first.stream_id
    assert first.text + joined.text == "".join(answer(truth))
    assert second is None  # one generation
    assert orjson.loads(cancelled.body)["cancelled"] is True
    assert long_truth.finish_reason == "cancelled"


def test_with_redis_down_streams_go_on_and_health_says_so(tmp_path: Path) -> None:
    down = RedisServer(tmp_path)  # a port where nothing listens: never started
    with LabServer("steady") as lab:
        config = gateway_config(upstream(lab, "lab"), resume={"store": down.url})
        with GatewayServer(config) as gw:
            read = read_stream(gw.url, "POST", CHAT, chat_body(6))

            def reported_down() -> bytes | None:
                _, body = get(gw.url, "/healthz")
                return body if not orjson.loads(body)["resume"]["up"] else None

            health = orjson.loads(wait_for(reported_down, what="/healthz to say so"))
            _, metrics = get(gw.url, "/metrics")
            here = read_stream(gw.url, "GET", f"/v1/streams/{read.stream_id}")
    assert read.status == 200
    assert read.ids == list(range(1, len(read.events) + 1))
    assert read.events[-1][1] == "[DONE]"
    assert health["status"] == "ok"
    assert health["resume"] == {"store": "redis", "up": False}
    assert b"steadystream_resume_store_up 0.0" in metrics
    assert here.status == 200
    assert here.ids == read.ids
