"""The lab against hostile input: fault headers, request ids, bodies, scenarios and seeds
that once gave tracebacks, unbounded work or misleading answers, each refused clearly now."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from steadystream import ConfigError, FakeClock, SpecError
from steadystream._processes import free_port
from steadystream.cli import _register, app
from steadystream.files import read_jsonl
from steadystream.lab import LabServer, create_app
from steadystream.lab.api import ApiError, ChatRequest, CompletionRequest, parse_body
from steadystream.lab.faults import parse_fault_header
from steadystream.lab.scenario import MAX_OVERSIZE_BYTES, MAX_TOKENS
from steadystream.lab.scenario_file import load_scenario
from steadystream.lab.scheduler import Scheduler
from steadystream.lab.sequence import Sequence
from steadystream.lab.server import _resetter
from steadystream.lab.stream import Ending
from tests.support.lab import scenario, wait_serving

FAST = scenario(
    "steady",
    scheduler={"step_base_ms": 2.0},
    output={"min_tokens": 4, "max_tokens": 8},
    kv_cache={"total_blocks": 1024},
)
CHAT = {"model": "lab", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
TIMEOUT = aiohttp.ClientTimeout(total=15)


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer(FAST, seed=1) as server:
        yield server


async def _post(url: str, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(url, data=orjson.dumps(body), headers=headers) as response,
    ):
        lowered = {k.lower(): v for k, v in response.headers.items()}
        return response.status, lowered, orjson.loads(await response.read())


# -- the X-Lab-Fault header -------------------------------------------------------------------


def test_an_oversize_fault_is_bounded() -> None:
    # 1000GiB once became one "x" * 2**40 (a MemoryError mid-response, or the host's memory).
    assert parse_fault_header("oversize-after=1:64MiB").oversize_bytes == MAX_OVERSIZE_BYTES
    for size in ("1000GiB", f"{MAX_OVERSIZE_BYTES + 1}", "9" * 5000):
        with pytest.raises(SpecError, match=r"at most|larger than the largest size held"):
            parse_fault_header(f"oversize-after=1:{size}")


@pytest.mark.integration
@pytest.mark.asyncio
@pytest.mark.parametrize("size", ["1000GiB", "9" * 5000])
async def test_an_oversize_fault_too_large_is_a_400_naming_the_header(
    lab: LabServer, size: str
) -> None:
    # 5000 digits once passed int()'s limit: a ValueError, a 500 and a traceback.
    headers = {"X-Lab-Fault": f"oversize-after=1:{size}"}
    status, _, body = await _post(f"{lab.base_url}/chat/completions", CHAT, headers)
    assert status == 400
    assert body["error"]["param"] == "X-Lab-Fault"


# -- request ids ------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.asyncio
@pytest.mark.parametrize("given", ["x" * 300, "../etc/passwd", "has space", "caf\u00e9"])
async def test_a_request_id_unfit_for_a_header_or_path_is_replaced(
    lab: LabServer, given: str
) -> None:
    # A non-ASCII id once came back re-encoded (another id than the one sent); a long one
    # or a path became the ground truth's key and the completion's id.
    headers = {"X-Request-Id": given}
    status, got, body = await _post(f"{lab.base_url}/chat/completions", CHAT, headers)
    assert status == 200
    assert re.fullmatch(r"lab-\d{6}", got["x-request-id"])
    assert body["id"] == f"chatcmpl-{got['x-request-id']}"
    assert lab.truth(given) is None
    assert lab.truth(got["x-request-id"]) is not None


# -- request bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "body", "param"),
    [
        (
            ChatRequest,
            {"model": "lab", "messages": [{"role": "user", "content": [{"text": 5}]}]},
            "messages.0.content.0.type",
        ),
        (
            ChatRequest,
            {
                "model": "lab",
                "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            },
            "messages.0.content.0.text",
        ),
        (ChatRequest, {"model": "lab", "messages": [{"role": "user", "content": 5}]}, None),
        (CompletionRequest, {"model": "lab", "prompt": [[1, 2]]}, "prompt.0"),
        (CompletionRequest, {"model": "lab", "prompt": 5}, "prompt"),
    ],
)
def test_a_refusal_names_the_field_not_a_union_member(
    model: type[Any], body: dict[str, Any], param: str | None
) -> None:
    # pydantic's locations name the union's members: "messages.0.content.str" was the
    # param, with "Input should be a valid string", for a list whose item was wrong.
    with pytest.raises(ApiError) as caught:
        parse_body(orjson.dumps(body), model)
    error = caught.value
    expected = param if param is not None else "messages.0.content"
    assert error.param == expected
    assert error.message.startswith(f"{expected}: ")


# -- scenarios --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("scheduler: {step_base_ms: .inf}", "scheduler.step_base_ms"),
        ("scheduler: {lag_reset_ms: .inf}", "scheduler.lag_reset_ms"),
        ("network: {base_delay_ms: .inf}", "network.base_delay_ms"),
        ("faults: {slow_first_token_ms: .inf}", "faults.slow_first_token_ms"),
        ("emission: {tail_interval_ms: .inf}", "emission.tail_interval_ms"),
        ("output: {min_tokens: 1, max_tokens: 100000000000000000000}", "output.max_tokens"),
        ("background: {output_tokens: 100000000000000000000}", "background.output_tokens"),
        ("kv_cache: {total_blocks: 2000000, block_tokens: 16}", "kv_cache"),
        ("faults: {oversize_after: 1, oversize_bytes: 1000000000000}", "faults.oversize_bytes"),
    ],
)
def test_a_scenario_with_numbers_the_engine_cannot_hold_is_refused(
    tmp_path: Path, text: str, key: str
) -> None:
    # Each once loaded: infinity failed the engine's start or every request (OverflowError),
    # 10**20 tokens every request (numpy: "high is out of bounds for int64").
    path = tmp_path / "hostile.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_scenario(path)


def test_the_largest_scenario_numbers_still_load(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    blocks = MAX_TOKENS // 16
    path.write_text(
        f"kv_cache: {{total_blocks: {blocks}, block_tokens: 16}}\n"
        f"output: {{min_tokens: 1, max_tokens: {MAX_TOKENS}}}\n"
        f"faults: {{oversize_bytes: {MAX_OVERSIZE_BYTES}}}\n"
    )
    loaded = load_scenario(path)
    assert loaded.kv_cache.total_blocks * loaded.kv_cache.block_tokens == MAX_TOKENS
    assert loaded.output.max_tokens == MAX_TOKENS


def test_background_arrivals_due_by_the_million_are_counted_not_walked() -> None:
    # every_ms 1e-6 is one arrival per ns: the scheduler once stepped through each due
    # arrival, skipped or not, 25 million a 25 ms step, and the lab stopped answering.
    hostile = scenario("steady", background={"every_ms": 1e-6, "max_alive": 3})
    made: list[int] = []

    def make(at_ns: int) -> Sequence:
        made.append(at_ns)
        return Sequence(len(made), at_ns, at_ns, 8, 4, Ending.LENGTH)

    scheduler = Scheduler(hostile, FakeClock(), make_background=make)
    scheduler.start_background(0)
    lines = 0

    def budget(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
            if lines > 10_000:
                raise AssertionError("the scheduler walks the due arrivals one by one")
        return budget

    previous = sys.gettrace()
    sys.settrace(budget)
    try:
        scheduler.boundary(50_000_000)  # 50 ms: 50 million arrivals due
    finally:
        sys.settrace(previous)
    assert made == [0, 1, 2]  # the first three, while fewer than max_alive are alive
    assert scheduler.bg_next_ns == 50_000_001
    assert len(scheduler.waiting) == 3


# -- the seed ---------------------------------------------------------------------------------


def test_a_negative_seed_is_refused_before_serving() -> None:
    # numpy seeds from non-negative integers only: every request was a 500 and a traceback.
    with pytest.raises(ConfigError, match="seed"):
        create_app("steady", seed=-1)
    _register()
    result = CliRunner().invoke(app, ["lab", "--seed", "-1"])
    assert result.exit_code == 2
    assert "--seed" in result.output


def test_a_record_path_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    # A folder once raised IsADirectoryError out of the command, a traceback and exit 1.
    _register()
    for record in (tmp_path, tmp_path / "missing" / "truth.jsonl"):
        result = CliRunner().invoke(app, ["lab", "--record", str(record), "--port", "0"])
        assert result.exit_code == 2, result.output
        assert "--record: cannot write" in result.output
        assert not (tmp_path / "missing").exists()


@pytest.mark.integration
def test_ctrl_c_ends_open_streams_as_a_shutdown_and_records_them(tmp_path: Path) -> None:
    # uvicorn waits for open streams before the app's shutdown: a stalled stream was
    # cancelled after the graceful time, a traceback, and its ground truth never recorded.
    record = tmp_path / "truth.jsonl"
    port = free_port()
    command = [
        sys.executable, "-c", "from steadystream.cli import main; main()",
        "lab", "--port", str(port), "--record", str(record),
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rest = b""
    try:
        base = f"http://127.0.0.1:{port}"
        wait_serving(base, server)
        request = urllib.request.Request(
            f"{base}/v1/chat/completions",
            data=orjson.dumps({**CHAT, "max_tokens": 50, "stream": True}),
            headers={
                "Content-Type": "application/json",
                "X-Request-Id": "open-1",
                "X-Lab-Fault": "stall-after=2:forever",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            events = 0
            while events < 3:  # the role chunk and two tokens: the stall has begun
                events += response.readline().startswith(b"data: ")
            server.send_signal(signal.SIGINT)
            rest = response.read()
    finally:
        if not rest and server.poll() is None:  # (once only: a second Ctrl-C forces)
            server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=20)[0].decode()
    assert b"the lab is shutting down" in rest, rest
    assert rest.endswith(b"data: [DONE]\n\n")
    assert "Traceback" not in output, output
    (timeline,) = read_jsonl(record).timelines
    assert timeline.stream_id == "open-1"
    assert timeline.total_tokens == 2


# -- the reset fault --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_reset_of_a_connection_already_closed_is_done() -> None:
    # A client that leaves as reset-after fires: its connection is gone from uvicorn's list,
    # and the lab raised to drop it, a traceback in the log for a client already gone.
    server: Any = SimpleNamespace(server_state=SimpleNamespace(connections=set()))
    reset = _resetter(server)
    assert await reset({"type": "http", "client": ("127.0.0.1", 50000)}) is True
    assert await reset({"type": "http", "client": None}) is False  # no way to find it
