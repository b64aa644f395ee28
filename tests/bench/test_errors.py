"""Every way a request can fail becomes that stream's outcome, with a clear message."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import abc, web

from steadystream import Outcome, TokenSource
from steadystream.bench import Bench, ClosedLoop, Endpoint, RunOptions, RunResult, Workload
from steadystream.bench.client import MOST_EVENTS, most_events
from steadystream.bench.workload import builtin_prompts
from steadystream.lab import LabServer, scenario_from_mapping
from steadystream.protocol import DONE, chat_chunk, encode_chunk
from tests.support.bench import closed_port, small_run

pytestmark = pytest.mark.integration


def chunk(text: str) -> bytes:
    return encode_chunk(chat_chunk("c", "m", 1, content=text))


async def sse(request: web.Request, *parts: bytes) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for part in parts:
        await response.write(part)
    await response.write_eof()
    return response


async def malformed(request: web.Request) -> web.StreamResponse:
    return await sse(request, chunk("hi"), b"data: {not json\n\n", chunk("never"), DONE)


async def no_done(request: web.Request) -> web.StreamResponse:
    return await sse(request, chunk("one"), chunk(" two"))


async def json_body(request: web.Request) -> web.StreamResponse:
    return web.json_response({"choices": [{"message": {"content": "whole"}}]})


async def web_page(request: web.Request) -> web.StreamResponse:
    # A login page, or a proxy's, where the API was expected.
    return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")


async def endless(request: web.Request) -> web.StreamResponse:
    # Ignores max_tokens and never ends: a run of --requests would wait for it for ever.
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(100_000):  # (bounded: the client leaves long before)
        await response.write(chunk("x") * 50)
    return response


async def picky(request: web.Request) -> web.StreamResponse:
    # Refuses vLLM's continuous_usage_stats, as strict OpenAI-compatible servers do.
    body = await request.json()
    if "continuous_usage_stats" in (body.get("stream_options") or {}):
        message = {"error": {"message": "Unrecognized argument: continuous_usage_stats"}}
        return web.json_response(message, status=400)
    usage = b'data: {"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 3}}\n\n'
    return await sse(request, chunk("a"), chunk("b"), usage, DONE)


async def no_usage_until_length(request: web.Request) -> web.StreamResponse:
    # llama-cpp-python: one token a chunk, no usage whatever is asked, cut at max_tokens.
    body = await request.json()
    tokens = [chunk(" lighthouses") for _ in range(body["max_tokens"])]
    finish = encode_chunk(chat_chunk("c", "m", 1, content="", finish_reason="length"))
    return await sse(request, *tokens, finish, DONE)


@pytest_asyncio.fixture
async def odd_server() -> AsyncIterator[str]:
    """A loopback server whose streams go wrong in the ways real ones do."""
    app = web.Application()
    for name, handler in (
        ("malformed", malformed),
        ("nodone", no_done),
        ("json", json_body),
        ("page", web_page),
        ("endless", endless),
        ("picky", picky),
        ("llama", no_usage_until_length),
    ):
        app.router.add_post(f"/{name}/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def one(base_url: str, **bench: Any) -> RunResult:
    endpoint = Endpoint(base_url, bench.pop("model", "lab"), headers=bench.pop("headers", ()))
    async with Bench(endpoint, Workload(builtin_prompts(), max_tokens=8), **bench) as session:
        return await session.run(ClosedLoop(1), RunOptions(max_requests=1))


@pytest.mark.asyncio
async def test_connection_refused() -> None:
    port = closed_port()
    (timeline,) = (await one(f"http://127.0.0.1:{port}/v1")).timelines
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error is not None
    assert timeline.error.startswith(f"cannot connect to http://127.0.0.1:{port}:")
    assert "refused" in timeline.error.lower()
    assert len(timeline) == 0


class FailingResolver(abc.AbstractResolver):
    """A resolver that answers as a DNS server does for a name that does not exist."""

    async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[Any]:
        raise OSError(socket.EAI_NONAME, "Name or service not known")

    async def close(self) -> None:
        return None


@pytest.mark.asyncio
async def test_dns_failure() -> None:
    result = await one("http://no-such-host.invalid/v1", resolver=FailingResolver())
    (timeline,) = result.timelines
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error == "DNS failure: cannot resolve the host of http://no-such-host.invalid"


@pytest.mark.asyncio
async def test_http_errors_carry_the_servers_message(lab: LabServer) -> None:
    (missing,) = (await one(lab.base_url, model="gpt-nope")).timelines
    assert missing.outcome is Outcome.ERROR
    assert missing.meta["http_status"] == 404
    assert missing.error is not None
    assert missing.error.startswith("HTTP 404")
    assert "The model `gpt-nope` does not exist" in missing.error
    bad_fault = (("X-Lab-Fault", "explode=now"),)
    (refused,) = (await one(lab.base_url, headers=bad_fault)).timelines
    assert refused.error is not None
    assert refused.error.startswith("HTTP 400")
    assert "X-Lab-Fault" in refused.error


@pytest.mark.asyncio
async def test_in_band_error_and_reset_mid_stream(lab: LabServer) -> None:
    (errored,) = (await one(lab.base_url, headers=(("X-Lab-Fault", "error-after=3"),))).timelines
    assert errored.outcome is Outcome.ERROR
    assert errored.error is not None
    assert "error-after" in errored.error
    assert int(errored.text_mask.sum()) == 3  # what came before the error is kept
    (reset,) = (await one(lab.base_url, headers=(("X-Lab-Fault", "reset-after=3"),))).timelines
    assert reset.outcome is Outcome.TRUNCATED
    assert reset.error is not None
    assert reset.error.startswith("connection lost mid-stream")


@pytest.mark.asyncio
async def test_malformed_sse_no_done_and_a_json_body(odd_server: str) -> None:
    (bad,) = (await one(f"{odd_server}/malformed/v1")).timelines
    assert bad.outcome is Outcome.ERROR
    assert bad.error is not None
    assert "JSON" in bad.error
    assert bad.text == "hi" or bad.texts is None
    (cut,) = (await one(f"{odd_server}/nodone/v1")).timelines
    assert cut.outcome is Outcome.TRUNCATED
    assert cut.error == "stream ended without [DONE] or a finish reason"
    (whole,) = (await one(f"{odd_server}/json/v1")).timelines
    assert whole.outcome is Outcome.ERROR
    assert whole.error is not None
    assert "not an event stream" in whole.error
    (page,) = (await one(f"{odd_server}/page/v1")).timelines
    assert page.outcome is Outcome.ERROR
    assert page.error is not None
    assert "a web page (text/html), not an event stream" in page.error  # (was: cut mid-event)


@pytest.mark.asyncio
async def test_a_stream_far_past_its_max_tokens_is_closed_as_an_error(odd_server: str) -> None:
    (endless,) = (await one(f"{odd_server}/endless/v1")).timelines
    assert endless.outcome is Outcome.ERROR
    assert endless.error == (
        "the server sent more than 1,032 events for max_tokens 8; closed by the client"
    )
    assert 1_032 <= len(endless.times) <= 1_032 + 50  # what was read is kept
    assert most_events(None) == MOST_EVENTS


@pytest.mark.asyncio
async def test_usage_options_step_down_when_refused(odd_server: str) -> None:
    result = await one(f"{odd_server}/picky/v1")
    (timeline,) = result.timelines
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.meta["usage_requested"] == "on"
    assert timeline.usage == {"completion_tokens": 2, "prompt_tokens": 3}
    assert len(result.notes) == 1
    assert "refused usage level 'continuous'" in result.notes[0]


@pytest.mark.asyncio
async def test_a_stream_cut_at_max_tokens_without_usage_counts_max_tokens(odd_server: str) -> None:
    (timeline,) = (await one(f"{odd_server}/llama/v1")).timelines
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.usage is None
    assert timeline.token_source is TokenSource.MAX_TOKENS
    assert timeline.total_tokens == 8  # the Workload's max_tokens, not ~3 a chunk from the text
    assert timeline.meta["max_tokens"] == 8


@pytest.mark.asyncio
async def test_a_run_goes_on_past_errors() -> None:
    # Half the requests (seeded) get an in-band error after two tokens; the run does them all.
    flaky = scenario_from_mapping({"preset": "steady", "faults": {"share": 0.5, "error_after": 2}})
    with LabServer(flaky, seed=3) as server:
        result = await small_run(server.base_url, requests=8, max_tokens=6)
    outcomes = [t.outcome for t in result.timelines]
    assert len(outcomes) == 8
    assert 0 < outcomes.count(Outcome.ERROR) < 8
    assert outcomes.count(Outcome.COMPLETE) == 8 - outcomes.count(Outcome.ERROR)
    snapshot = result.progress.snapshot()
    assert snapshot.errors == outcomes.count(Outcome.ERROR)
    assert snapshot.first_error is not None
    assert "error-after" in snapshot.first_error
