"""`bench` and `gate` against hostile input: rules past a float's range, runs whose every
stream failed, absurd loads and token counts, prompt files that are not UTF-8, a server that
never ends a stream, and a server whose error text carries terminal escapes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from steadystream import FakeClock, InputError, Outcome, SpecError
from steadystream._clock import NS_PER_MS
from steadystream.bench import Bench, Endpoint, Workload
from steadystream.bench.config import BenchConfig
from steadystream.bench.gate import GateRule
from steadystream.bench.progress import RunProgress
from steadystream.bench.schedule import ClosedLoop, Dispatcher, OpenLoop
from steadystream.bench.workload import TokenCount, builtin_prompts, read_prompts
from steadystream.cli import _register, app
from steadystream.cli._bench_view import render_snapshot
from steadystream.files import write_jsonl
from tests.support.bench import steady_run
from tests.support.timelines import make_timeline

_register()
cli = CliRunner()

_CHUNK = (
    b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"w "},"finish_reason":null}]}\n\n'
)
_ESCAPES = "slow down \x1b]0;pwned\x07\x1b[2J\x1b[31mRED"


@contextlib.contextmanager
def hostile_server(mode: str) -> Iterator[str]:
    """A server on 127.0.0.1 in its own thread: ``forever`` streams chunks without end,
    ``429`` refuses every request with an error text full of terminal escapes."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    port: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET"):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            elif mode == "429":
                body = json.dumps({"error": {"message": _ESCAPES}}).encode()
                writer.write(
                    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for _ in range(100_000):  # "forever", bounded
                    writer.write(b"%x\r\n%s\r\n" % (len(_CHUNK), _CHUNK))
                    await writer.drain()
                    await asyncio.sleep(0.005)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def serve() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        return server

    def run() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(serve())
        started.set()
        loop.run_forever()
        server.close()
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield f"http://127.0.0.1:{port[0]}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


# -- gate ----------------------------------------------------------------------------------------


def test_a_limit_past_a_floats_range_is_refused() -> None:
    # 400 digits read as float('inf'): a limit of "+inf%" judged every rule "unsure".
    with pytest.raises(SpecError, match="out of range"):
        GateRule.parse("p99_of_p99=" + "9" * 400 + "%")


def test_a_gate_that_judged_nothing_is_undecided_not_passed(tmp_path: Path) -> None:
    base, cand = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    write_jsonl(base, steady_run(10))
    failed = [
        make_timeline([], stream_id=f"e{k}", role_ms=None, outcome=Outcome.ERROR) for k in range(10)
    ]
    write_jsonl(cand, failed)
    args = ["gate", str(base), str(cand), "--no-defaults", "--max-regression", "p99_of_p99=10%"]
    result = cli.invoke(app, args)
    assert result.exit_code == 4, result.output
    assert "gate passed" not in result.output
    assert "no rule could be judged" in result.output
    as_json = cli.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 4
    assert '"passed": false' in as_json.output


# -- schedule: absurd loads ----------------------------------------------------------------------


def test_a_huge_concurrency_opens_only_the_slots_it_uses() -> None:
    async def tickets() -> list[int]:
        dispatcher = Dispatcher(ClosedLoop(10**6), FakeClock(), max_requests=3)
        return [t.index async for t in dispatcher.tickets()]

    tracemalloc.start()
    try:
        indices = asyncio.run(tickets())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert indices == [0, 1, 2]
    assert peak < 4_000_000  # a list of a million openings alone takes ~40 MB


@pytest.mark.parametrize(
    "schedule", [ClosedLoop(10**6), OpenLoop(rate=1e300)], ids=["concurrency", "rate"]
)
def test_requests_due_at_once_let_the_loop_run(schedule: ClosedLoop | OpenLoop) -> None:
    # Every request is due at once: each one's task must start before the next is handed
    # out, or none starts (nor Ctrl-C, nor the deadline) until the last is handed out.
    async def run() -> list[tuple[int, int]]:
        dispatcher = Dispatcher(schedule, FakeClock(), max_requests=5)
        started: list[int] = []
        seen = []
        async for ticket in dispatcher.tickets():
            seen.append((ticket.index, len(started)))
            asyncio.get_running_loop().create_task(_start(started, ticket.index))
        return seen

    async def _start(started: list[int], index: int) -> None:
        started.append(index)

    assert asyncio.run(run()) == [(i, i) for i in range(5)]


# -- workload: absurd token counts, files that are not UTF-8 --------------------------------------


@pytest.mark.parametrize(
    "text", ["99999999999999999999", "uniform:1-99999999999999999999999", "normal:5,99999999999"]
)
def test_token_counts_past_the_bound_are_refused(text: str) -> None:
    # These raised numpy's ValueError or orjson's TypeError mid-run, as a traceback.
    with pytest.raises(SpecError, match="at most 10,000,000 tokens"):
        TokenCount.parse(text, name="--output-tokens")
    with pytest.raises(SpecError, match="--output-tokens"):
        BenchConfig(url="http://127.0.0.1:1/v1", model="m", output_tokens=text)


def test_a_wide_normal_never_draws_past_the_bound() -> None:
    import numpy as np

    count = TokenCount.parse("normal:10000000,10000000")
    draws = [count.draw(np.random.default_rng(seed)) for seed in range(50)]
    assert max(draws) == 10_000_000  # the bound (workload.MAX_TOKEN_COUNT)
    assert min(draws) >= 1


def test_max_tokens_past_the_bound_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="--max-tokens"):
        BenchConfig(url="http://127.0.0.1:1/v1", model="m", max_tokens=10**20)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi", "max_tokens": 100000000000000000000000}\n')
    with pytest.raises(InputError, match="'max_tokens' must be a whole number from 1 to"):
        read_prompts(prompts)


def test_a_prompts_file_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    prompts = tmp_path / "latin1.jsonl"
    prompts.write_bytes('{"prompt": "café"}\n'.encode("latin-1"))
    with pytest.raises(
        InputError, match=r"latin1.jsonl:1: not UTF-8 text \(byte 0xe9 at column 16\)"
    ):
        read_prompts(prompts)


# -- a server that never ends a stream -----------------------------------------------------------


def test_a_warm_up_stream_that_never_ends_is_cut() -> None:
    # The warm-up had no bound: `bench --duration 2s` against such a server never began.
    async def warm() -> list[Outcome]:
        with hostile_server("forever") as url:
            async with Bench(Endpoint(url, "m"), Workload(builtin_prompts())) as bench:
                timelines = await asyncio.wait_for(
                    bench.warm_up(1, limit_ns=200 * NS_PER_MS), timeout=30
                )
        return [t.outcome for t in timelines]

    assert asyncio.run(warm()) == [Outcome.CANCELLED]


# -- what a server says is shown, never run ------------------------------------------------------


def test_an_error_text_with_terminal_escapes_is_defused(tmp_path: Path) -> None:
    with hostile_server("429") as url:
        result = cli.invoke(
            app,
            [
                "bench",
                url,
                "-m",
                "m",
                "-o",
                str(tmp_path / "r.jsonl"),
                "--no-live",
                "--requests",
                "2",
                "--warmup",
                "0",
            ],
        )
    assert result.exit_code == 3, result.output
    assert "HTTP 429" in result.output
    assert "pwned" in result.output  # the text is shown...
    assert "\x1b" not in result.output  # ...its escapes are not sent to the terminal
    assert "\x07" not in result.output


def test_the_live_view_defuses_escapes_in_the_first_error() -> None:
    progress = RunProgress(FakeClock())
    progress.request_sent()
    failed = make_timeline([], stream_id="s1", role_ms=None, outcome=Outcome.ERROR)
    failed.error = f"HTTP 429: {_ESCAPES}"
    progress.request_done(failed)
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=200).print(
        render_snapshot(progress.snapshot(), "run", 1, None)
    )
    shown = out.getvalue()
    assert "pwned" in shown
    assert "\x1b]0;" not in shown
    assert "\x1b[2J" not in shown


# -- the live view counts client lag as the summary does -----------------------------------------


def test_the_live_view_counts_only_streams_the_runner_flagged() -> None:
    # Kernel stamps: a stream open while the loop lagged 9 ms, none of whose events shared a
    # stamp, is not flagged (docs/bench.md#fidelity); the live view counted it all the same.
    progress = RunProgress(FakeClock())
    quiet = make_timeline([10, 20, 30], stream_id="a")
    quiet.meta.update(loop_lag_max_ms=9.0, client_lagged=False, stamps="kernel")
    flagged = make_timeline([10, 20, 30], stream_id="b")
    flagged.meta.update(loop_lag_max_ms=9.0, client_lagged=True, stamps="user")
    for timeline in (quiet, flagged):
        progress.request_sent()
        progress.request_done(timeline)
    assert progress.snapshot().lagged_streams == 1
