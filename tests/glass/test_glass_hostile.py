"""The glass intake, its files and its command against hostile or careless input: a token
header with a digit that is not ASCII, a disk that cuts a write short, clients that change
address within their IPv6 /64, budgets that would wait forever, and outputs the command
cannot write (or that are the very run it replays)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from steadystream._api_errors import ApiError
from steadystream._clock import FakeClock
from steadystream._types import Where
from steadystream.cli import _register, app
from steadystream.files import read_jsonl, write_jsonl
from steadystream.gateway.server import GatewayServer
from steadystream.glass import recording as glass_recording
from steadystream.glass.budget import ClientBudgets, OverBudget
from steadystream.glass.recording import GlassRecorder
from steadystream.glass.tokens import GLASS_TOKEN_HEADER, GlassTokens
from tests.support.gateway import MemorySink, connect, gateway_config, read_until
from tests.support.timelines import make_timeline

_register()
runner = CliRunner()

NOWHERE = {"name": "u", "base_url": "http://127.0.0.1:9/v1"}  # (glass never calls upstream)
GLASS = {"accept": True}
RECORDING = {"enabled": True}


def report(stream_id: str = "page-1") -> dict[str, Any]:
    return {
        "schema": "steadystream.glass/1",
        "stream_id": stream_id,
        "arrivals": [[20.0, 1], [40.0, 1]],
        "frames": [[25.0, 1], [50.0, 1]],
    }


def raw_post(url: str, body: bytes, token: bytes) -> bytes:
    """POST to the intake with the token header as raw bytes (latin-1, as HTTP carries it)."""
    sock = connect(url)
    try:
        sock.sendall(
            b"POST /steadystream/glass HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n%s: %s\r\n\r\n%s"
            % (len(body), GLASS_TOKEN_HEADER.encode(), token, body)
        )
        return read_until(sock, b"\0")  # (until the gateway closes the connection)
    finally:
        sock.close()


def test_a_token_whose_expiry_has_a_digit_that_is_not_ascii_is_refused_not_a_500() -> None:
    # '²' (0xB2 in latin-1, as a header byte decodes) passes str.isdigit, and int() failed
    # on it: a traceback and a 500 for anyone who sends that byte.
    config = gateway_config(NOWHERE, glass=GLASS, recording=RECORDING)
    sink = MemorySink()
    with GatewayServer(config, recorder=sink) as gw:
        tokens = gw.state.glass_tokens
        assert tokens is not None
        good = tokens.mint("page-1", "default")
        version, _, rest = good.partition(".")
        _, _, mac_and_id = rest.partition(".")
        body = orjson.dumps(report())
        for expires in (b"\xb2", b"1\xb9", b"\xb3\xb3"):
            forged = version.encode() + b"." + expires + b"." + mac_and_id.encode()
            answer = raw_post(gw.url, body, forged)
            assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
            assert b"glass_token_invalid" in answer
        # nothing was recorded, and the page's own token still takes its report
        assert not [t for t in sink.timelines if t.where is Where.GLASS]
        assert raw_post(gw.url, body, good.encode()).startswith(b"HTTP/1.1 204")


def test_the_token_check_refuses_every_non_ascii_digit() -> None:
    tokens = GlassTokens(b"s" * 32, 300, lambda: 1_767_225_600.0)
    version, expires, mac, stream_id = tokens.mint("p", "t").split(".", 3)
    for digits in ("\u00b2", "\u0661\u0662", "\uff11"):  # superscript, Arabic-Indic, fullwidth
        with pytest.raises(ApiError) as caught:
            tokens.check(f"{version}.{digits}.{mac}.{stream_id}", "t")
        assert (caught.value.status, caught.value.code) == (403, "glass_token_invalid")
    assert tokens.check(f"{version}.{expires}.{mac}.{stream_id}", "t").stream_id == "p"


def test_a_write_the_disk_cuts_short_leaves_the_glass_file_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = GlassRecorder(tmp_path, max_disk_bytes=1 << 20)
    recorder.write([make_timeline([1.0, 2.0], stream_id="before")])
    real_write = os.write
    calls = {"n": 0}

    def disk_fills(fd: int, data: Any) -> int:  # half the report fits, then the disk is full
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(glass_recording.os, "write", disk_fills)
    with pytest.raises(OSError, match="No space"):
        recorder.write([make_timeline([1.0, 2.0, 3.0], stream_id="cut")])
    monkeypatch.setattr(glass_recording.os, "write", real_write)
    recorder.write([make_timeline([1.0], stream_id="after")])  # (space again)
    files = sorted(tmp_path.glob("glass-*.jsonl"))
    runs = [read_jsonl(f) for f in files]  # old code: TimelineFormatError at the cut line
    assert [t.stream_id for run in runs for t in run.timelines] == ["before", "after"]
    assert all(run.truncated_line is None for run in runs)


def test_a_cut_that_cannot_be_undone_sends_the_next_report_to_a_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = GlassRecorder(tmp_path, max_disk_bytes=1 << 20)
    recorder.write([make_timeline([1.0], stream_id="before")])
    real_write = os.write

    def cut(fd: int, data: Any) -> int:
        monkeypatch.setattr(glass_recording.os, "write", real_write)
        real_write(fd, bytes(data)[:10])
        raise OSError(errno.EIO, "Input/output error")

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(glass_recording.os, "write", cut)
    monkeypatch.setattr(glass_recording.os, "ftruncate", no_truncate)
    with pytest.raises(OSError, match="Input/output"):
        recorder.write([make_timeline([1.0], stream_id="cut")])
    recorder.write([make_timeline([1.0], stream_id="after")])
    runs = [read_jsonl(f) for f in sorted(tmp_path.glob("glass-*.jsonl"))]
    assert [t.stream_id for run in runs for t in run.timelines] == ["before", "after"]
    assert [run.truncated_line for run in runs] == [2, None]  # the cut stays at an end


def test_ipv6_clients_of_one_64_share_a_budget_on_an_open_gateway() -> None:
    from steadystream.gateway.app import create_app
    from steadystream.gateway.glass import client_address

    assert client_address("2001:db8:0:7::1") == client_address("2001:db8:0:7:ffff::9")
    assert client_address("2001:db8:0:7::1") != client_address("2001:db8:0:8::1")
    assert client_address("::ffff:192.0.2.7") == client_address("192.0.2.7") == "192.0.2.7"
    assert client_address("testclient") == "testclient"

    glass = {**GLASS, "client_report_burst": 1, "client_reports_per_s": 0.001}
    config = gateway_config(NOWHERE, glass=glass)
    sink = MemorySink()
    gateway = create_app(config, clock=FakeClock(), recorder=sink)
    tokens = gateway.state.gateway.glass_tokens

    def send(http: TestClient, stream_id: str) -> int:
        body = orjson.dumps(report(stream_id))
        token = tokens.mint(stream_id, "default")
        answer = http.post("/steadystream/glass", content=body, headers={GLASS_TOKEN_HEADER: token})
        return answer.status_code

    with TestClient(gateway, client=("2001:db8:0:7::1", 40000)) as first:
        assert send(first, "r-1") == 204
        # The same host, another address of its /64: old code gave it a fresh budget.
        same_host = TestClient(gateway, client=("2001:db8:0:7:ffff::9", 40001))
        assert send(same_host, "r-2") == 429
        other = TestClient(gateway, client=("2001:db8:0:8::1", 40002))
        assert send(other, "r-3") == 204
    assert sorted(t.stream_id for t in sink.timelines if t.where is Where.GLASS) == ["r-1", "r-3"]


def test_a_budget_that_would_wait_forever_says_a_day_not_a_traceback() -> None:
    # A subnormal rate (the config takes any rate above zero): the wait is infinite, and
    # math.ceil(inf) raised OverflowError, a 500 for the post.
    budgets = ClientBudgets(
        posts_per_s=5e-324,
        post_burst=1,
        bytes_per_s=1,
        byte_burst=1024,
        max_clients=4,
        now_ns=lambda: 0,
    )
    assert budgets.take_post("c") == 0.0
    wait = budgets.take_post("c")
    assert wait > 0
    over = OverBudget("5e-324 reports a second", wait)
    assert over.retry_after == "86400"
    assert over.response().headers["retry-after"] == "86400"


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    write_jsonl(path, [make_timeline([10.0, 20.0], stream_id="rec")])
    return path


@pytest.fixture
def no_chromium(monkeypatch: pytest.MonkeyPatch) -> None:
    """No browser: a command that got past its checks stops at once (and says so)."""
    import steadystream.report

    monkeypatch.setattr(steadystream.report, "find_chromium", lambda: None)


def glass_command(*args: str) -> Any:
    return runner.invoke(app, ["glass", "page.html", *args], env={"COLUMNS": "300"})


@pytest.mark.usefixtures("no_chromium")
@pytest.mark.parametrize(
    ("output", "problem"),
    [
        ("missing/out.jsonl", "does not exist"),
        ("out.txt", "name a timeline file"),
        (".", "name a timeline file"),
    ],
)
def test_the_command_refuses_an_output_it_cannot_write_before_any_run(
    run_file: Path, tmp_path: Path, output: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = glass_command("--replay", str(run_file), "-o", output)
    assert result.exit_code == 2
    # old code: the runs went first (minutes), then a traceback or an error lost them all
    assert "--output" in result.output, result.output
    assert problem in result.output
    assert "Chromium" not in result.output


@pytest.mark.usefixtures("no_chromium")
def test_the_command_never_writes_over_the_run_it_replays(run_file: Path) -> None:
    before = run_file.read_bytes()
    result = glass_command("--replay", str(run_file), "-o", str(run_file))
    assert result.exit_code == 2
    assert "--output" in result.output, result.output
    assert "recorded run replayed" in result.output
    assert run_file.read_bytes() == before


@pytest.mark.usefixtures("no_chromium")
@pytest.mark.parametrize("timeout", ["0s", "25h", "720h"])
def test_the_command_refuses_a_deadline_playwright_would_misread(
    run_file: Path, timeout: str
) -> None:
    # Playwright takes 0 as no deadline at all, and one past about 24.8 days as 1 ms.
    result = glass_command("--replay", str(run_file), "--timeout", timeout)
    assert result.exit_code == 2
    assert "--timeout" in result.output, result.output
    assert "at most 24h" in result.output


def test_a_failed_runs_message_is_bounded_whatever_the_page_logs() -> None:
    pytest.importorskip("playwright")
    import asyncio

    from playwright.async_api import Error as PlaywrightError

    from steadystream.glass.harness import _one_run

    class Message:
        type = "error"

        def __init__(self, text: str) -> None:
            self.text = text

    class Page:
        def __init__(self, answer: Any = None) -> None:
            self.answer = answer
            self.listeners: list[Any] = []

        def on(self, _event: str, listener: Any) -> None:
            self.listeners.append(listener)

        async def goto(self, url: str, timeout: float) -> None:
            for i in range(5000):  # a page that logs an error in a loop
                for listener in self.listeners:
                    listener(Message(f"error {i} " + "x" * 100_000))
            if self.answer is None:
                raise PlaywrightError("page crashed")

        async def wait_for_function(self, script: str, timeout: float) -> None:
            pass

        async def evaluate(self, script: str, options: Any) -> Any:
            return self.answer

        async def close(self) -> None:
            pass

    class Browser:
        def __init__(self, page: Page) -> None:
            self.page = page

        async def new_page(self, **_: Any) -> Page:
            return self.page

    failed = asyncio.run(_one_run(Browser(Page()), "about:blank", "r-1", "hi", 1.0))  # type: ignore[arg-type]
    assert failed is not None
    assert failed.startswith("r-1: page crashed (console: error 4997 ")
    assert "error 4999" in failed
    assert "error 4996" not in failed
    assert len(failed) < 5_000  # old code: three 100 kB lines
    odd = {"outcome": "weird", "text": "y" * 1_000_000}
    ended = asyncio.run(_one_run(Browser(Page(odd)), "about:blank", "r-2", "hi", 1.0))  # type: ignore[arg-type]
    assert ended is not None
    assert ended.startswith("r-2: the page ended with {'outcome'")
    assert len(ended) < 5_000


def test_a_page_with_sixteen_labels_keeps_its_report_when_the_probe_truncates() -> None:
    # docs/glass.md: up to 16 labels of the page's; the probe adds truncated_probe past its
    # maxEvents. Old code refused the 17th: the report of the longest streams was lost.
    from steadystream.glass.intake import GlassLimits, parse_report

    own = {f"label-{i}": "x" for i in range(16)}
    body = {**report(), "labels": {**own, "truncated_probe": "1"}}
    taken = parse_report(orjson.dumps(body), GlassLimits())
    assert taken.labels["truncated_probe"] == "1"
    assert len(taken.labels) == 17
    for labels in ({**own, "label-16": "x"}, {**own, "truncated_probe": "1", "label-16": "x"}):
        with pytest.raises(ApiError) as caught:
            parse_report(orjson.dumps({**report(), "labels": labels}), GlassLimits())
        assert (caught.value.status, caught.value.param) == (400, "labels")
        assert "at most 16 labels" in caught.value.message
