"""bench against hostile servers in the Responses and Messages dialects (chat for comparison):
legal but unusual streams are counted right; bad, endless and key-quoting ones become that
stream's outcome with a clear message and no key, and what came before is kept."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from steadystream import EventKind, Outcome, TokenSource
from steadystream.bench import Bench, ClosedLoop, Endpoint, RunOptions, RunResult, Workload
from steadystream.bench.client import MAX_EVENT_BYTES
from steadystream.bench.workload import builtin_prompts
from steadystream.files import JsonlWriter, read_jsonl
from steadystream.protocol import chat_chunk, encode_chunk

pytestmark = pytest.mark.integration

KEY = "sk-proj-Hostile0123456789abcdefXYZ"
K, C, T, F, R, E, N = (
    EventKind.KEEPALIVE,
    EventKind.CONTENT,
    EventKind.REASONING,
    EventKind.TOOL_CALL,
    EventKind.ROLE,
    EventKind.ERROR,
    EventKind.EMPTY,
)


def event(kind: str, **fields: Any) -> bytes:
    # (json, not orjson: a hostile count may be past 64 bits)
    data = json.dumps({"type": kind, **fields}).encode()
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


# -- Messages ------------------------------------------------------------------------------

M_START = event(
    "message_start",
    message={"id": "msg_1", "model": "m", "content": [], "usage": {"input_tokens": 5}},
)


def text(piece: str, index: int = 0) -> bytes:
    return event("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})


def m_end(output_tokens: Any, reason: str = "end_turn") -> bytes:
    usage = {"output_tokens": output_tokens}
    return event("message_delta", delta={"stop_reason": reason}, usage=usage) + event(
        "message_stop"
    )


def block(index: int, kind: str, **fields: Any) -> bytes:
    return event("content_block_start", index=index, content_block={"type": kind, **fields})


def delta(index: int, kind: str, **fields: Any) -> bytes:
    return event("content_block_delta", index=index, delta={"type": kind, **fields})


# -- Responses -----------------------------------------------------------------------------

R_START = event("response.created", sequence_number=0, response={"id": "resp_1", "model": "m"})


def r_text(piece: Any, output_index: int = 0) -> bytes:
    return event(
        "response.output_text.delta", sequence_number=1, output_index=output_index, delta=piece
    )


def r_end(output_tokens: Any, kind: str = "response.completed", **response: Any) -> bytes:
    usage = {"input_tokens": 3, "output_tokens": output_tokens}
    return event(kind, sequence_number=9, response={"usage": usage, **response})


# -- chat ----------------------------------------------------------------------------------


def chunk(piece: str) -> bytes:
    return encode_chunk(chat_chunk("c", "m", 1, content=piece))


Part = bytes | float | str  # bytes to write, seconds to wait, "reset"
STREAMS: dict[str, list[Part]] = {
    "m-rich": [
        M_START,
        block(0, "thinking", thinking=""),
        delta(0, "thinking_delta", thinking="hmm"),
        delta(0, "signature_delta", signature="EqQBCgIYAhIM"),
        event("content_block_stop", index=0),
        block(1, "text", text=""),
        event("ping"),
        b": keepalive\n\n",
        text("Hi", 1),
        text(" there", 1),
        event("content_block_stop", index=1),
        block(2, "tool_use", id="toolu_1", name="f", input={}),
        delta(2, "input_json_delta", partial_json='{"a": '),
        delta(2, "input_json_delta", partial_json="1}"),
        event("content_block_stop", index=2),
        event("a_future_event", anything=[1, 2]),
        m_end(5, "tool_use"),
    ],
    "r-rich": [
        R_START,
        event("response.in_progress", sequence_number=1),
        event("response.output_item.added", sequence_number=2, output_index=0, item={}),
        event("response.reasoning_summary_text.delta", sequence_number=3, delta="think"),
        event("response.output_item.added", sequence_number=4, output_index=1, item={}),
        r_text("A", 1),
        b": keepalive\n\n",
        event("response.output_item.added", sequence_number=6, output_index=2, item={}),
        r_text("B", 2),
        event("response.function_call_arguments.delta", sequence_number=8, delta='{"x": 1}'),
        event("response.a_future_event", sequence_number=9),
        r_end(4),
    ],
    "r-incomplete": [
        R_START,
        r_text("a"),
        r_end(1, "response.incomplete", incomplete_details={"reason": "max_output_tokens"}),
    ],
    # Hostile: the last good event is kept, the bad one named.
    "m-bad-json": [M_START, text("a"), b"event: content_block_delta\ndata: {nope\n\n"],
    "m-not-object": [M_START, text("a"), b"data: [1, 2]\n\n"],
    "m-number-text": [M_START, text("a"), delta(0, "text_delta", text=5)],
    "r-number-delta": [R_START, r_text("a"), r_text(7)],
    "r-response-list": [R_START, r_text("a"), event("response.completed", response=[1])],
    "r-failed": [
        R_START,
        r_text("a"),
        event("response.failed", response={"error": {"code": "server_error", "message": "boom"}}),
    ],
    "r-error": [R_START, r_text("a"), event("error", code="overloaded", message="busy")],
    "m-error": [M_START, text("a"), event("error", error={"type": "overloaded_error"})],
    "m-after-stop": [M_START, text("a"), m_end(1), text("late"), b"data: {garbage\n\n"],
    "r-after-end": [R_START, r_text("a"), r_end(1), r_text("late"), b"data: {garbage\n\n"],
    "m-reset": [M_START, text("a"), b'event: content_block_delta\ndata: {"type":', 0.05, "reset"],
    "r-reset": [R_START, r_text("a"), b"event: response.output_text.delta\ndata: {", 0.05, "reset"],
    # Counts no timeline can hold: not taken, the text estimated.
    "m-negative-usage": [M_START, text("a"), text("b"), m_end(-3)],
    "m-huge-usage": [M_START, text("a"), text("b"), m_end(2**70)],
    "r-huge-usage": [R_START, r_text("a"), r_text("b"), r_end(2**70)],
    "r-string-usage": [R_START, r_text("a"), r_text("b"), r_end("2")],
    # A server that quotes the key back, in every place an error can carry it.
    "m-key-error": [
        M_START,
        text("a"),
        event("error", error={"type": "authentication_error", "message": f"bad x-api-key {KEY}"}),
    ],
    "m-key-type": [M_START, text("a"), event("error", error={"type": KEY, "message": "x"})],
    "m-key-plain-error": [
        M_START,
        text("a"),
        b"event: error\ndata: bad key " + KEY.encode() + b"\n\n",
    ],
    "r-key-error": [R_START, r_text("a"), event("error", code="auth", message=f"Bearer {KEY}")],
    "r-key-failed": [
        R_START,
        r_text("a"),
        event("response.failed", response={"error": {"message": f"Bearer {KEY} refused"}}),
    ],
    "r-key-bad-json": [R_START, r_text("a"), b"data: {" + b"p" * 60 + KEY.encode() + b"\n\n"],
    "c-key-error": [chunk("a"), b'data: {"error": {"message": "key ' + KEY.encode() + b'"}}\n\n'],
    "m-ok": [M_START, text("a"), text("b"), m_end(2)],
    "r-ok": [R_START, r_text("a"), r_text("b"), r_end(2)],
}
API = {"m": "messages", "r": "responses", "c": "chat"}
TURNS = web.AppKey("turns", list[int])  # the mixed run's requests so far


async def write_stream(request: web.Request, parts: list[Part]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    with_eof = True
    for part in parts:
        if isinstance(part, float):
            await asyncio.sleep(part)
        elif part == "reset":
            assert request.transport is not None
            request.transport.abort()
            with_eof = False
            break
        else:
            assert isinstance(part, bytes)
            await response.write(part)
    if with_eof:
        await response.write_eof()
    return response


async def big_event(request: web.Request, size: int, *, ends: bool) -> web.StreamResponse:
    """A Messages text delta of ``size`` bytes of text, in 64 KiB writes; ``ends``: then the
    rest of a good stream, else the event goes on until the client leaves (bounded)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(M_START + text("a"))
    await response.write(b'event: content_block_delta\ndata: {"type": "content_block_delta", ')
    await response.write(b'"index": 0, "delta": {"type": "text_delta", "text": "')
    try:
        for _ in range(size // 65_536 if ends else 2 * MAX_EVENT_BYTES // 65_536):
            await response.write(b"y" * 65_536)
        await response.write(b'"}}\n\n' + m_end(3))
    except ConnectionError:
        return response  # the client left, as it should have
    await response.write_eof()
    return response


async def special(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "html":
        return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")
    if name == "429":  # Anthropic's shape, the key quoted, a Retry-After
        error = {"type": "rate_limit_error", "message": f"slow down, {KEY}"}
        return web.json_response(
            {"type": "error", "error": error}, status=429, headers={"Retry-After": "3"}
        )
    if name == "header-echo":  # a proxy that quotes the credential header it was given
        echoed = request.headers.get("X-Upstream-Authorization", "")
        return web.json_response({"error": {"message": f"refused {echoed}"}}, status=401)
    if name == "big":
        return await big_event(request, 10_000_000, ends=True)
    if name == "endless":
        return await big_event(request, 0, ends=False)
    if name == "echo":  # the model repeats the key in its answer
        return await write_stream(request, [M_START, text(f"your key is {KEY}"), m_end(5)])
    if name == "mixed":  # a run's streams: good, key-quoting error, reset mid-event, good
        turns = request.app[TURNS]
        script = ["m-ok", "m-key-error", "m-reset", "m-ok"][len(turns) % 4]
        turns.append(len(turns))
        return await write_stream(request, STREAMS[script])
    raise web.HTTPNotFound()


async def stream(request: web.Request) -> web.StreamResponse:
    return await write_stream(request, STREAMS[request.match_info["name"]])


@pytest_asyncio.fixture
async def server() -> AsyncIterator[str]:
    """A loopback server: ``{url}/{name}/v1`` serves stream ``name`` on every API's path."""
    app = web.Application()
    app[TURNS] = []
    for path in ("chat/completions", "responses", "messages"):
        app.router.add_post(f"/x/{{name}}/v1/{path}", special)
        app.router.add_post(f"/{{name}}/v1/{path}", stream)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def run(
    url: str,
    api: str,
    *,
    requests: int = 1,
    keep_text: bool = False,
    output: Path | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> RunResult:
    endpoint = Endpoint(url, "m", kind=api, api_key=KEY, headers=headers)
    writer = JsonlWriter(output, keep_text=keep_text) if output is not None else None
    try:
        async with Bench(
            endpoint, Workload(builtin_prompts(), max_tokens=8), keep_text=keep_text
        ) as bench:
            return await bench.run(
                ClosedLoop(1),
                RunOptions(max_requests=requests),
                sink=writer.write if writer is not None else None,
            )
    finally:
        if writer is not None:
            writer.close()


async def one(server: str, name: str, **options: Any) -> Any:
    api = options.pop("api", None) or API[name[0]]
    result = await run(f"{server}/{name}/v1", api, **options)
    (timeline,) = result.timelines
    return timeline


@pytest.mark.asyncio
async def test_a_messages_stream_with_every_kind_of_block_is_counted(server: str) -> None:
    timeline = await one(server, "m-rich")
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.error is None
    assert timeline.kinds.tolist() == [R, K, T, K, K, K, K, K, C, C, K, K, F, F, K, K, N]
    # Pings, block starts and stops, the signature and the unknown event are never tokens:
    # the five output tokens go to the five text events.
    assert timeline.tokens[timeline.text_mask].sum() == 5
    assert timeline.tokens[~timeline.text_mask].sum() == 0
    assert timeline.usage == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}


@pytest.mark.asyncio
async def test_a_responses_stream_over_several_items_is_counted(server: str) -> None:
    timeline = await one(server, "r-rich")
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.error is None
    assert timeline.kinds.tolist() == [R, K, K, T, K, C, K, K, C, F, K]
    assert timeline.token_source is TokenSource.USAGE_ONE_PER_EVENT
    assert timeline.tokens.tolist() == [0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0]


@pytest.mark.asyncio
async def test_response_incomplete_ends_the_stream_with_its_usage(server: str) -> None:
    timeline = await one(server, "r-incomplete")
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.usage is not None
    assert timeline.usage["completion_tokens"] == 1


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("m-bad-json", "Messages event is not valid JSON"),
        ("m-not-object", "Messages event must be a JSON object, got a list"),
        ("m-number-text", "text_delta: text is a number, expected a string"),
        ("r-number-delta", "response.output_text.delta: delta is a number, expected a string"),
        ("r-response-list", "response.completed: response is a list, expected an object"),
        ("r-failed", "server_error: boom"),
        ("r-error", "overloaded: busy"),
        ("m-error", "overloaded_error: error event with no message"),
    ],
)
async def test_a_bad_or_failed_event_is_an_error_and_what_came_before_is_kept(
    server: str, name: str, error: str
) -> None:
    timeline = await one(server, name)
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error.startswith(error)
    assert "Traceback" not in timeline.error
    assert timeline.kinds.tolist() == [R, C, E]  # the first text kept, the bad event named


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["m-after-stop", "r-after-end"])
async def test_events_after_the_end_are_not_recorded(server: str, name: str) -> None:
    timeline = await one(server, name)
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.error is None
    assert EventKind.ERROR not in timeline.kinds.tolist()
    assert timeline.text_mask.sum() == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["m-reset", "r-reset"])
async def test_a_reset_mid_event_is_truncated(server: str, name: str) -> None:
    timeline = await one(server, name)
    assert timeline.outcome is Outcome.TRUNCATED
    assert timeline.error.startswith("connection lost mid-stream")
    assert timeline.kinds.tolist() == [R, C]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "name", ["m-negative-usage", "m-huge-usage", "r-huge-usage", "r-string-usage"]
)
async def test_usage_no_timeline_can_hold_is_not_taken(server: str, name: str) -> None:
    timeline = await one(server, name)
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.usage is None or "completion_tokens" not in timeline.usage
    assert timeline.token_source is TokenSource.ESTIMATED
    assert timeline.tokens[timeline.text_mask].tolist() == [1, 1]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "name",
    [
        "m-key-error",
        "m-key-type",
        "m-key-plain-error",
        "r-key-error",
        "r-key-failed",
        "r-key-bad-json",
        "c-key-error",
    ],
)
async def test_a_key_quoted_in_an_error_is_not_recorded(
    server: str, name: str, tmp_path: Path
) -> None:
    output = tmp_path / "run.jsonl"
    timeline = await one(server, name, output=output)
    assert timeline.outcome is Outcome.ERROR
    assert "***" in timeline.error
    assert KEY[:8] not in timeline.error
    assert KEY[:8] not in output.read_text()


@pytest.mark.asyncio
async def test_an_http_error_quoting_the_key_keeps_its_message_not_the_key(server: str) -> None:
    timeline = await one(server, "x/429", api="messages")
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error == "HTTP 429 Too Many Requests: slow down, ***"


@pytest.mark.asyncio
async def test_a_key_in_a_kept_answer_is_not_written(server: str, tmp_path: Path) -> None:
    output = tmp_path / "run.jsonl"
    timeline = await one(server, "x/echo", api="messages", keep_text=True, output=output)
    assert timeline.outcome is Outcome.COMPLETE
    assert "your key is ***" in timeline.texts
    assert KEY[:8] not in output.read_text()


@pytest.mark.asyncio
async def test_a_credential_header_is_hidden_too(server: str) -> None:
    token = "tok-Another0123456789"
    headers = (("X-Upstream-Authorization", f"Bearer {token}"),)
    timeline = await one(server, "x/header-echo", api="responses", headers=headers)
    assert timeline.error == "HTTP 401 Unauthorized: refused ***"


def test_a_key_cut_short_is_hidden_from_its_start() -> None:
    scrubber = Endpoint(base_url="http://127.0.0.1:1/v1", model="m", api_key=KEY).scrubber()
    assert scrubber is not None
    cut = f"preview: 'bad {KEY[:12]}...'"
    assert scrubber.text(cut) == "preview: 'bad ***...'"
    assert scrubber.text("sk-proj-") == "***"  # its first 8 characters are enough
    assert scrubber.text("sk-proj") == "sk-proj"  # fewer: too little to hide
    assert scrubber.text(f"escaped: \\u0073{KEY[1:]}") == "escaped: ***"  # as JSON spells it


def test_a_placeholder_key_is_no_secret() -> None:
    assert Endpoint(base_url="http://127.0.0.1:1/v1", model="m", api_key="EMPTY").scrubber() is None


@pytest.mark.asyncio
async def test_a_web_page_is_an_error(server: str) -> None:
    timeline = await one(server, "x/html", api="responses")
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error.startswith("the server answered with a web page (text/html)")


@pytest.mark.asyncio
async def test_a_ten_megabyte_event_is_read_whole(server: str) -> None:
    timeline = await one(server, "x/big", api="messages")
    assert timeline.outcome is Outcome.COMPLETE
    assert timeline.kinds.tolist() == [R, C, C, N]
    assert timeline.text_bytes[2] > 9_000_000


@pytest.mark.asyncio
async def test_an_event_that_never_ends_is_cut_at_the_bound(server: str) -> None:
    timeline = await asyncio.wait_for(one(server, "x/endless", api="messages"), 60)
    assert timeline.outcome is Outcome.ERROR
    assert timeline.error == (
        f"an event grew past {MAX_EVENT_BYTES:,} bytes without ending; closed by the client"
    )
    assert timeline.kinds.tolist() == [R, C]  # what came before it is kept


@pytest.mark.asyncio
async def test_a_bad_stream_leaves_the_runs_other_streams_whole(
    server: str, tmp_path: Path
) -> None:
    output = tmp_path / "run.jsonl"
    result = await run(f"{server}/x/mixed/v1", "messages", requests=4, output=output)
    outcomes = sorted(t.outcome.value for t in result.timelines)
    assert outcomes == ["complete", "complete", "error", "truncated"]
    read = read_jsonl(output)
    assert len(read.timelines) == 4
    assert KEY[:8] not in output.read_text()
