"""The replay server in simulated time: recorded gaps kept exactly, injections, ground truth."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from steadystream._clock import FakeClock
from steadystream.protocol.openai import timeline_from_sse
from steadystream.replay import create_app, parse_injection
from steadystream.timeline import Timeline
from tests.support.replay import http_scope
from tests.support.timelines import make_timeline

MS = 1_000_000
GAPS_MS = [30.0, 12.0, 250.0, 20.0, 20.0, 5.0, 40.0, 20.0, 20.0, 33.0]


def recorded(stream_id: str = "rec-1", ttft_ms: float = 180.0) -> Timeline:
    times = [ttft_ms]
    for gap in GAPS_MS:
        times.append(times[-1] + gap)
    return make_timeline(times, stream_id=stream_id, tokens=[1, 2, 1, 1, 3, 1, 1, 1, 1, 1, 1])


class Exchange:
    """One request to the app, driven by hand; every message stamped with the fake clock."""

    def __init__(
        self, app: Any, clock: FakeClock, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> None:
        self.clock = clock
        self.start = clock.now_ns()
        self.sent: list[tuple[int, dict[str, Any]]] = []
        self.leave = asyncio.Event()
        raw = orjson.dumps(body)
        scope = http_scope(
            "POST",
            path,
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ]
            + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        )
        first = True

        async def receive() -> dict[str, Any]:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": raw, "more_body": False}
            await self.leave.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            self.sent.append((clock.now_ns(), message))

        self.task = asyncio.ensure_future(app(scope, receive, send))

    @property
    def status(self) -> int:
        return int(self.sent[0][1]["status"])

    def timeline(self) -> Timeline:
        reads = [
            (t - self.start, m["body"])
            for t, m in self.sent
            if m["type"] == "http.response.body" and m["body"]
        ]
        return timeline_from_sse(reads, stream_id="replayed")

    def body(self) -> Any:
        return orjson.loads(
            b"".join(m.get("body", b"") for _, m in self.sent if m["type"] == "http.response.body")
        )


CHAT = {"model": "anything", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


async def ask(
    app: Any,
    clock: FakeClock,
    body: dict[str, Any] = CHAT,
    path: str = "/v1/chat/completions",
    **headers: str,
) -> Exchange:
    exchange = Exchange(app, clock, path, body, headers)
    await clock.run_until_idle(limit_ns=clock.now_ns() + 3_600 * 10**9)
    await asyncio.wait_for(exchange.task, 1)
    return exchange


def content_gaps_ms(timeline: Timeline) -> list[float]:
    times = timeline.times[timeline.text_mask]
    return [round(float(g) / MS, 3) for g in (times[1:] - times[:-1])]


async def get(app: Any, path: str) -> tuple[int, Any]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = http_scope("GET", path)
    await app(scope, receive, send)
    return sent[0]["status"], orjson.loads(b"".join(m.get("body", b"") for m in sent[1:]))


@pytest.mark.asyncio
async def test_a_stream_is_played_with_its_recorded_gaps_and_chunking_exactly() -> None:
    clock = FakeClock()
    app = create_app([recorded()], clock=clock)
    exchange = await ask(app, clock, **{"x-request-id": "r-1"})
    assert exchange.status == 200
    played = exchange.timeline()
    assert content_gaps_ms(played) == GAPS_MS
    assert played.times[played.text_mask][0] == 180 * MS
    assert played.outcome.value == "complete"
    status, truth = await get(app, "/replay/requests/r-1")
    assert status == 200
    assert truth["source_stream"] == "rec-1"
    assert truth["outcome"] == "complete"
    content = [e for e in truth["events"] if e["kind"] == "content"]
    assert [e["tokens"] for e in content] == [1, 2, 1, 1, 3, 1, 1, 1, 1, 1, 1]
    assert all(e["written_ns"] == e["planned_ns"] for e in content)


@pytest.mark.asyncio
async def test_injections_are_played_and_are_the_ground_truth() -> None:
    clock = FakeClock()
    pause = parse_injection("pause:2s@50%")  # 14 tokens: token 7 is in event 4 (tokens 5-7)
    app = create_app([recorded()], injections=[pause], clock=clock)
    exchange = await ask(app, clock, **{"x-request-id": "r-2"})
    gaps = content_gaps_ms(exchange.timeline())
    assert gaps[3] == GAPS_MS[3] + 2_000
    assert gaps[:3] + gaps[4:] == GAPS_MS[:3] + GAPS_MS[4:]
    _, truth = await get(app, "/replay/requests/r-2")
    assert truth["injected"][0] == {
        "spec": "pause:2s@50%",
        "token": 7,
        "event": 4,
        "fired": True,
        "added_ns": 2_000 * MS,
    }
    content = [e for e in truth["events"] if e["kind"] == "content"]
    assert content[4]["causes"] == ["injected-fault"]
    assert content[4]["extra_ns"] == {"injected-fault": 2_000 * MS}
    assert truth["fault"] == "pause:2s@50%"


@pytest.mark.asyncio
async def test_streams_go_by_header_else_in_turn_and_an_unknown_id_is_a_404() -> None:
    clock = FakeClock()
    app = create_app([recorded("a", 100.0), recorded("b", 300.0)], clock=clock)
    firsts = []
    for _ in range(3):
        played = (await ask(app, clock)).timeline()
        firsts.append(int(played.times[played.text_mask][0] // MS))
    assert firsts == [100, 300, 100]
    chosen = (await ask(app, clock, **{"X-Replay-Stream": "b"})).timeline()
    assert chosen.times[chosen.text_mask][0] == 300 * MS
    missing = await ask(app, clock, **{"X-Replay-Stream": "nope"})
    assert missing.status == 404
    assert missing.body()["error"]["param"] == "X-Replay-Stream"


@pytest.mark.asyncio
async def test_a_stall_holds_until_the_deadline_then_ends_cut_off() -> None:
    clock = FakeClock()
    app = create_app(
        [recorded()],
        injections=[parse_injection("stall:forever@50%")],
        clock=clock,
        stall_limit_ns=30 * 10**9,
    )
    exchange = await ask(app, clock, **{"x-request-id": "r-3"})
    played = exchange.timeline()
    assert int(played.text_mask.sum()) == 4  # token 7 is in event 4: events 0-3 go out
    assert played.outcome.value == "truncated"
    last_write = exchange.sent[-1][0]
    assert last_write == (180 + sum(GAPS_MS[:3])) * MS + 30 * 10**9
    _, truth = await get(app, "/replay/requests/r-3")
    assert truth["outcome"] == "truncated"


@pytest.mark.asyncio
async def test_a_client_that_leaves_mid_stall_is_recorded_as_cancelled() -> None:
    clock = FakeClock()
    app = create_app([recorded()], injections=[parse_injection("stall:forever@start")], clock=clock)
    exchange = Exchange(app, clock, "/v1/chat/completions", CHAT, {"x-request-id": "r-4"})
    await clock.advance(10 * 10**9)
    exchange.leave.set()
    await clock.advance(1)
    await asyncio.wait_for(exchange.task, 1)
    _, truth = await get(app, "/replay/requests/r-4")
    assert truth["outcome"] == "cancelled"
    assert truth["disconnect_noticed_ns"] == 10 * 10**9


@pytest.mark.asyncio
async def test_a_whole_completion_comes_at_the_recorded_end_with_all_the_text() -> None:
    clock = FakeClock()
    app = create_app([recorded()], clock=clock)
    body = {"model": "m", "prompt": "hi", "stream": False}
    exchange = await ask(app, clock, body, "/v1/completions")
    assert exchange.status == 200
    answer = exchange.body()
    assert answer["object"] == "text_completion"
    assert answer["usage"]["completion_tokens"] == 14
    assert exchange.sent[0][0] == (180 + sum(GAPS_MS)) * MS
    truncated = create_app([recorded()], injections=[parse_injection("truncate@50%")], clock=clock)
    cut = await ask(truncated, clock, body, "/v1/completions")
    assert cut.status == 502
    assert "truncate@50%" in cut.body()["error"]["message"]


@pytest.mark.asyncio
async def test_a_bad_body_is_a_400_naming_the_field() -> None:
    clock = FakeClock()
    app = create_app([recorded()], clock=clock)
    exchange = await ask(app, clock, {"model": "m", "stream": True, "messages": []})
    assert exchange.status == 400
    assert exchange.body()["error"]["param"] == "messages"


class _Server:
    """An ASGI server's side as uvicorn's is: a write waits while the client's window is
    full, and once the client has left every write returns at once, dropped."""

    def __init__(self, clock: FakeClock, stuck_after: int) -> None:
        self.clock = clock
        self.stuck_after = stuck_after  # body writes the client takes before it stops reading
        self.delivered: list[bytes] = []
        self.disconnected = False
        self.complete = False
        self.changed = asyncio.Event()
        self.window = asyncio.Event()

    def ask(self, app: Any, request_id: str) -> asyncio.Future[None]:
        """A chat request to ``app`` through this server: its task."""
        raw = orjson.dumps(CHAT)
        headers = [(b"content-type", b"application/json"), (b"x-request-id", request_id.encode())]
        scope = http_scope("POST", "/v1/chat/completions", headers)
        asked = False

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await self.receive()

        return asyncio.ensure_future(app(scope, receive, self.send))

    def leave(self) -> None:
        self.disconnected = True
        self.changed.set()
        self.window.set()

    async def receive(self) -> dict[str, Any]:
        while not (self.disconnected or self.complete):
            await self.changed.wait()
            self.changed.clear()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and len(self.delivered) >= self.stuck_after:
            await self.window.wait()
        if self.disconnected:
            return
        if message["type"] == "http.response.body":
            self.delivered.append(message["body"])
            if not message.get("more_body", False):
                self.complete = True
                self.changed.set()


@pytest.mark.asyncio
async def test_events_dropped_after_the_client_left_are_not_recorded_as_written() -> None:
    # The client stops reading after the opening and two events, and leaves 1 s after the
    # stream's end was due: the write waiting for its window returns (dropped) and so do
    # the rest. The truth keeps only what went out.
    clock = FakeClock()
    app = create_app([recorded()], clock=clock)
    server = _Server(clock, stuck_after=3)
    task = server.ask(app, "r-gone")
    await clock.advance(2 * 10**9)
    assert not task.done()  # (waiting for the client's window)
    server.leave()
    await clock.advance(1)
    await asyncio.wait_for(task, 1)
    _, truth = await get(app, "/replay/requests/r-gone")
    played = timeline_from_sse(
        [(i, body) for i, body in enumerate(server.delivered) if body], stream_id="out"
    )
    assert int(played.tokens.sum()) == truth["tokens_written"] == 3
    assert truth["outcome"] == "cancelled"
    assert truth["disconnect_noticed_ns"] == 2 * 10**9


@pytest.mark.asyncio
async def test_a_client_that_reads_to_the_end_is_not_taken_for_one_that_left() -> None:
    # The server reports the disconnect of a finished response too (uvicorn does).
    clock = FakeClock()
    app = create_app([recorded()], clock=clock)
    server = _Server(clock, stuck_after=10**6)
    task = server.ask(app, "r-all")
    await clock.run_until_idle(limit_ns=3_600 * 10**9)
    await asyncio.wait_for(task, 1)
    _, truth = await get(app, "/replay/requests/r-all")
    assert truth["outcome"] != "cancelled"
    assert truth["tokens_written"] == 14
    assert server.complete
    assert server.delivered[-1].endswith(b"data: [DONE]\n\n")
