"""The lab's writer on a fake connection in simulated time, for any API's wire, and what it
wrote: bodies stamped with the fake clock, cut into SSE events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from steadystream import FakeClock
from steadystream.lab import LabEngine, LabMetrics, LabRequest, Scenario, parse_fault_header
from steadystream.lab.responses import LabResponse
from steadystream.lab.truth import RequestTruth
from steadystream.lab.wire import Wire
from steadystream.protocol import SseEvent, new_decoder
from tests.support.lab import MS

S = 1_000 * MS


@dataclass
class Written:
    """What the lab sent on one fake connection, each body stamped with the fake clock."""

    truth: RequestTruth
    status: int = 0
    bodies: list[tuple[int, bytes]] = field(default_factory=list)
    closed_at: int | None = None

    @property
    def raw(self) -> bytes:
        return b"".join(body for _, body in self.bodies)

    def events(self) -> list[bytes]:
        return [block for block in self.raw.split(b"\n\n") if block]

    def written_at(self, needle: bytes) -> int:
        return next(at for at, body in self.bodies if needle in body)


def named_events(raw: bytes) -> list[tuple[str, Any]]:
    """Each SSE event of ``raw`` as (event name, parsed JSON data), cut by the SSE decoder."""
    decoder = new_decoder()
    items = [*decoder.feed(raw), *decoder.close()]
    return [(i.event, orjson.loads(i.data)) for i in items if isinstance(i, SseEvent)]


async def respond(
    chosen: Scenario,
    wire: Callable[[RequestTruth], Wire],
    faults: str,
    *,
    stream: bool = True,
    max_tokens: int | None = 12,
    authorization: str | None = None,
    credential_name: str = "Authorization",
    leave_at_ns: int | None = None,
    metrics: LabMetrics | None = None,
) -> Written:
    """One request with ``X-Lab-Fault: faults``, written through ``wire(truth)`` on a fake
    connection in simulated time; the client leaves at ``leave_at_ns`` if given; what the
    lab's /metrics observe goes to ``metrics``."""
    clock = FakeClock()
    engine = LabEngine(chosen, clock=clock)
    await engine.start()
    handle = engine.submit(
        LabRequest("w-1", max_tokens=max_tokens, faults=parse_fault_header(faults), stream=stream)
    )
    response = LabResponse(
        handle,
        wire(handle.truth),
        stream=stream,
        request_id="w-1",
        metrics=metrics,
        resetter=None,
        authorization=authorization,
        credential_name=credential_name,
    )
    written = Written(handle.truth)
    left = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            written.status = message["status"]
        elif message["body"]:
            written.bodies.append((clock.now_ns(), message["body"]))
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            written.closed_at = clock.now_ns()

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    async def leave(at_ns: int) -> None:
        await clock.sleep_until(at_ns)
        left.set()

    leaver = asyncio.ensure_future(leave(leave_at_ns)) if leave_at_ns is not None else None
    task = asyncio.ensure_future(response({"type": "http"}, receive, send))
    await clock.run_until_idle(limit_ns=600 * S)
    await asyncio.wait_for(task, timeout=5)
    if leaver is not None:
        leaver.cancel()
    await engine.stop()
    return written
