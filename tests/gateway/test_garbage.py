"""A stream leaves no reference cycle behind, whatever way it ends.

The gateway's process tunes its garbage collector to run rarely (``steadystream._gc``): a
stream whose objects form a cycle would wait for a full collection, and a soak's memory would
climb. So every stream must be freed by reference counting alone: checked here with the
collector off, for streams that complete, fail over, are refused, and lose their client.
"""

from __future__ import annotations

import gc
import json
import socket
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from steadystream.gateway.relay import StreamRelay
from steadystream.gateway.server import GatewayServer
from steadystream.lab.server import LabServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, post, upstream

# The gateway's side only: the lab runs in this process too, and is not under test here.
_OURS = ("steadystream.gateway.", "steadystream.stamped.", "steadystream.shaping.")
NO_FAULT = "slow-first-token=0ms"


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _streams_alive() -> int:
    return sum(isinstance(obj, StreamRelay) for obj in gc.get_objects())


def _cycles() -> list[str]:
    """What of ours a collection finds unreachable (only cycles are left for it), once every
    stream has ended: a stream still running is reachable, and would hide its cycles."""
    deadline = time.monotonic() + 10
    while _streams_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    gc.collect()
    found = []
    for obj in gc.garbage:
        if isinstance(obj, FrameType):
            name = obj.f_globals.get("__name__", "")
            if name.startswith(_OURS):
                found.append(f"frame {name}.{obj.f_code.co_name}")
        elif type(obj).__module__.startswith(_OURS):
            found.append(type(obj).__qualname__)
    gc.garbage.clear()
    return sorted(set(found))


def _leave_early(base_url: str) -> None:
    host, _, port = base_url.removeprefix("http://").partition("/")[0].partition(":")
    body = json.dumps(chat_body(max_tokens=200)).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s:%s\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
            % (host.encode(), port.encode(), len(body), body)
        )
        sock.recv(4096)  # the head and the first events: the stream is under way


@pytest.mark.parametrize(
    "fault", [NO_FAULT, "reset-after=2", "stall-after=2:800ms", "error-after=2"]
)
def test_streams_leave_no_cycles(collector_off: None, fault: str) -> None:
    with LabServer("steady") as lab, LabServer("steady") as fallback:
        config = gateway_config(
            upstream(lab, "primary", fault=fault),
            upstream(fallback, "fallback", fault=NO_FAULT, priority=1),
            # Under the 800 ms stall, so that it fails over (a busy machine's pause past it
            # fails over a healthy stream too: as free of cycles, all the same).
            watchdog={"stall_timeout": "300ms"},
        )
        with GatewayServer(config) as gateway:
            post(gateway.base_url, "/chat/completions", chat_body(max_tokens=8))
            _cycles()  # what the first request loads stays: it is not a stream's
            for _ in range(3):
                answer = post(gateway.base_url, "/chat/completions", chat_body(max_tokens=8))
                assert answer.status == 200
            _leave_early(gateway.base_url)
            left = _cycles()
            assert not left, "\n".join(left)


@pytest.mark.parametrize(
    ("entry", "status"),
    [
        ({"fault": "no-such-fault=1"}, 400),  # the lab refuses the fault header: passed on
        ({"base_url": "http://127.0.0.1:9/v1"}, 502),  # nothing listens there
    ],
)
def test_a_refused_request_leaves_no_cycles(
    collector_off: None, entry: dict[str, str], status: int
) -> None:
    with LabServer("steady") as lab:
        if "fault" in entry:
            config = gateway_config(upstream(lab, "primary", fault=entry["fault"]))
        else:
            config = gateway_config({**upstream(lab, "primary"), **entry})
        with GatewayServer(config) as gateway:
            post(gateway.base_url, "/chat/completions", chat_body(max_tokens=8))
            _cycles()
            for _ in range(3):
                answer = post(gateway.base_url, "/chat/completions", chat_body(max_tokens=8))
                assert answer.status == status
            left = _cycles()
            assert not left, "\n".join(left)


def test_paced_streams_leave_no_cycles(collector_off: None) -> None:
    pacer = {"X-Steadystream-Pacer": "leaky:interval=5ms,capacity=100,tail=1s"}
    sink = MemorySink()
    with (
        LabServer("steady") as lab,
        GatewayServer(gateway_config(upstream(lab, "lab")), recorder=sink) as gw,
    ):
        post(gw.base_url, "/chat/completions", chat_body(max_tokens=8), pacer)
        _cycles()
        for n in range(3):
            headers = {**pacer, "X-Request-Id": f"paced-{n}"}
            answer = post(gw.base_url, "/chat/completions", chat_body(max_tokens=8), headers)
            assert answer.status == 200
            assert answer.done
            _, down = sink.edges(f"paced-{n}")
            assert str(down.meta["pacer"]).startswith("<Leaky")  # the paced writer ran
        left = _cycles()
        assert not left, "\n".join(left)
