"""The engine's /metrics page is a peer's: hostile pages are read in bounded time and memory.

A line built to make the parser backtrack is read in one pass (``aaa...a b c d``: a name that
could end anywhere ran into its value, 6 s for 16 KB before, days for 8 MiB); a value the
sidecar cannot hold is not written into it; a page is read whole or not at all, never cut
where a packet ended; a redirect is not followed; and a scrape in flight when the run ends
is cancelled, not raised into the bench or left running in the gateway.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from steadystream import InputError, engine_metrics
from steadystream.engine_metrics import (
    EngineScraper,
    next_wait,
    parse_exposition,
    read_engine_metrics,
    scraping,
    sidecar_path,
)
from steadystream.gateway import upstream_metrics
from steadystream.gateway.upstream_metrics import scraping_upstreams
from tests.support.attribution import by_prometheus_client
from tests.support.gateway import gateway_config
from tests.support.threaded_app import ThreadedApp

KEY = "sk-hostile-0123456789"
PAGE = b"".join(b'series_%d_total{engine="0"} %d\n' % (i, i) for i in range(1500))


class MetricsPeer(ThreadedApp):
    """``/metrics`` answers as ``mode`` says; ``/elsewhere`` counts who was sent there."""

    what = "the hostile metrics endpoint"

    def __init__(self, mode: str = "page", page: bytes = PAGE) -> None:
        super().__init__()
        self.mode = mode
        self.page = page
        self.requests = 0
        self.elsewhere = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/elsewhere", self._elsewhere)

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.elsewhere += 1
        return web.Response(body=PAGE)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        mode = self.mode
        if mode == "once-then-hang":
            mode = "page" if self.requests == 1 else "hang"
        if mode == "page":
            return web.Response(body=self.page)
        if mode == "gzip":
            return web.Response(body=gzip.compress(self.page), headers={"Content-Encoding": "gzip"})
        if mode == "redirect":
            raise web.HTTPFound(f"http://127.0.0.1:{self.port}/elsewhere")
        if mode == "unauthorized":
            return web.Response(status=401, text=f"wrong key: {KEY}", headers={"X-Echo": KEY})
        if mode == "declared-huge":  # says 100 MB and sends a first line
            response = web.StreamResponse(headers={"Content-Length": str(100 << 20)})
            await response.prepare(request)
            return await self._until_gone(request, response, b"a 1\n", once=True)
        response = web.StreamResponse()  # chunked
        await response.prepare(request)
        if mode == "split":  # a page in two packets: the first ends in a number's middle
            await response.write(self.page[:1000])
            await asyncio.sleep(0.05)
            await response.write(self.page[1000:])
            await response.write_eof()
            return response
        if mode == "endless":  # a chunked body that never ends, fast
            return await self._until_gone(request, response, b"a 1\n" * 4096)
        if mode == "trickle":  # a byte at a time
            return await self._until_gone(request, response, b"a")
        return await self._until_gone(request, response, b"", once=True)  # "hang"

    async def _until_gone(
        self, request: web.Request, response: web.StreamResponse, data: bytes, *, once: bool = False
    ) -> web.StreamResponse:
        """Send ``data`` (once, or again and again) until the client has gone."""
        try:
            while request.transport is not None and not request.transport.is_closing():
                if data:
                    await response.write(data)
                    data = b"" if once else data
                await asyncio.sleep(0.01)
        except ConnectionError:
            pass
        return response


def _scrape_once(url: str, path: Path, *, timeout_s: float = 1.0) -> EngineScraper:
    """One scrape of ``url`` into ``path`` (it succeeds or fails), as a run does it.

    (The next is due an hour later: a busy machine that holds this loop past the default
    interval cannot make it two.)"""

    async def scrape() -> EngineScraper:
        async with aiohttp.ClientSession() as session:
            scraper = EngineScraper(url, path, session, interval_s=3600.0, timeout_s=timeout_s)
            stop = asyncio.Event()
            task = asyncio.create_task(scraper.run(stop))
            while scraper.scrapes + scraper.failures == 0 and not task.done():
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.wait_for(task, 5)
            return scraper

    return asyncio.run(scrape())


# -- the parser: linear in the line ---------------------------------------------------------

MIB = 1 << 20


@pytest.mark.parametrize(
    "line",
    [
        b"a" * MIB + b" b c d",  # a name that could end anywhere, then no sample
        b"a" * MIB + b"{} 1 2 3",
        b"a" + b" " * MIB + b"b c d",
        b"a" * MIB,
        b"a" + b"{" * MIB,
        b"a{x=" + b'"' * MIB,
        b'a{x="' + b"\\" * MIB,
        b"a{" + b"=" * MIB,
        b"a{" + b"," * MIB + b"} 1 2 3",
        b"a{" + b'x="y",' * (MIB // 6) + b" 1 2 3",  # a label set that never closes
        b'a{x="' + b'\\"' * (MIB // 2) + b" 1 2 3",
        b"a 1 " + b"2" * MIB + b" 3",
    ],
    ids=lambda line: repr(line[:12]),
)
def test_a_megabyte_line_built_to_backtrack_is_refused_in_one_pass(line: bytes) -> None:
    # (Before, the first of these took days: the parser tried every split of name and value.)
    with pytest.raises(InputError, match="not Prometheus text: line 2"):
        parse_exposition(b"ok 1\n" + line + b"\nok 2\n")


def test_a_hundred_thousand_labels_on_one_line_read() -> None:
    labels = b",".join(b'l%d="v,}{ \\" x"' % i for i in range(100_000))
    assert parse_exposition(b"a{" + labels + b"} 2\n") == {"a": 2.0}


@pytest.mark.parametrize("line", ["abc123", "vllm:kv0.5", "a{}}1"])
def test_a_name_does_not_run_into_its_value(line: str) -> None:
    # (Before, ``abc123`` read as the series ``abc12`` at 3.)
    with pytest.raises(InputError, match="not Prometheus text: line 1"):
        parse_exposition(line + "\n")


# -- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("a NaN\nb +Inf\nc -Inf\nd 1e400\nok 1\n", {"ok": 1.0}),  # none a number to keep
        ("a -0\n", {"a": 0.0}),
        (f"a {2**64}\n", {"a": float(2**64)}),
        ("a 1 1700000000000\n", {"a": 1.0}),  # a timestamp is no value
        ("a 1\na 2\n", {"a": 3.0}),  # a duplicate series is summed, as prometheus_client does
        ("# TYPE a counter\na 1\n# TYPE a gauge\na 2\n", {"a": 3.0}),
        ("# TYPE\n# TYPE a\x00 nonsense {\n# HELP\n# HELP a \xff\na 1\n", {"a": 1.0}),
        ("a 1", {"a": 1.0}),  # no newline at the end
        ("a 1\r\nb 2\r\n", {"a": 1.0, "b": 2.0}),
        ('a{x="\\xff \x00"} 1\n', {"a": 1.0}),  # a label value is never decoded
        ("x_total -5\nx_total 2\ny -5\n", {"x_total": 2.0, "y": -5.0}),  # no counter below 0
        ("big 1e308\nbig 1e308\nok 1\n", {"ok": 1.0}),  # a sum past a float's range
    ],
)
def test_values(page: str, expected: dict[str, float]) -> None:
    assert parse_exposition(page) == expected


def test_invalid_utf8_and_nul_in_the_body() -> None:
    assert parse_exposition(b'a{x="\xff\xfe"} 1\n') == {"a": 1.0}
    for page in (b"a 1\x00\n", b"a\x00 1\n", b"a\xff 1\n"):
        with pytest.raises(InputError, match="line 1"):
            parse_exposition(page)


@pytest.mark.parametrize("value", ["0x10", "0x1p3", "1_000", "1_0.5"])
def test_a_number_prometheus_does_not_read_is_refused(value: str) -> None:
    # (Python's float reads 1_000 as 1000; Prometheus and prometheus_client refuse it.)
    with pytest.raises(InputError, match="line 1 has no number"):
        parse_exposition(f"a {value}\n")


@pytest.mark.parametrize(
    "page",
    [
        'a{x="\\\\"} 1\nb{x="\\\\\\""} 2\n',  # a value that ends in an escaped backslash
        'a{x="\\n",y="}"} 1\na{x="{",y=","} 2\n',
        'a{x="# not a comment"} 1\n# b 7\n',
        'a{x="a b\tc"} 1.5e-3\na{x="é ☃"} -2\n',
        'a{x="\\"} 9"} 4 1700000000000\n',  # a quote in a value, then what looks like a sample
        'a { x = "1" , } 3\n',
        "# HELP a the help \\n with \\\\ escapes\n# TYPE a gauge\na 5\n",
        'a_sum 0.5\na_count 3\na_bucket{le="+Inf"} 3\na_created 1.7e9\n',
        "a .5\nb 5.\nc +5\nd -0.0\ne 1E3\n",
    ],
)
def test_a_valid_page_reads_as_prometheus_client_reads_it(page: str) -> None:
    assert parse_exposition(page) == by_prometheus_client(page)


# -- the scraper against a hostile endpoint --------------------------------------------------


def _written(path: Path) -> list[dict[str, float]]:
    return [orjson.loads(line)["values"] for line in path.read_bytes().splitlines()]


# "split": a page in several packets (before, one read returned the first packet: a cut
# page, read as other values or none); "gzip": a page sent compressed.
@pytest.mark.parametrize("mode", ["split", "gzip"])
def test_a_page_in_packets_or_compressed_is_read_whole(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "m.jsonl"
    with MetricsPeer(mode) as peer:
        scraper = _scrape_once(f"http://127.0.0.1:{peer.port}/metrics", path)
    assert scraper.scrapes == 1
    assert _written(path) == [parse_exposition(PAGE)]


@pytest.mark.parametrize("mode", ["endless", "trickle", "declared-huge", "hang"])
def test_a_page_without_end_fails_the_scrape_in_its_timeout(tmp_path: Path, mode: str) -> None:
    # (Before, an endless or 100 MB body was cut at the first read and kept as a scrape.)
    path = tmp_path / "m.jsonl"
    with MetricsPeer(mode) as peer:
        scraper = _scrape_once(f"http://127.0.0.1:{peer.port}/metrics", path, timeout_s=0.3)
    assert scraper.scrapes == 0
    assert scraper.failures >= 1
    assert path.read_bytes() == b""


def test_a_page_over_the_bound_is_no_scrape(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    page = b"a 1\n" * (engine_metrics.MAX_BODY_BYTES // 4 + 1)
    with MetricsPeer("page", page) as peer:
        scraper = _scrape_once(f"http://127.0.0.1:{peer.port}/metrics", path)
    assert (scraper.scrapes, scraper.failures) == (0, 1)


def test_a_redirect_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    with MetricsPeer("redirect") as peer:
        scraper = _scrape_once(f"http://127.0.0.1:{peer.port}/metrics", path)
    assert peer.elsewhere == 0
    assert (scraper.scrapes, scraper.failures) == (0, 1)


def test_values_the_sidecar_cannot_hold_are_not_written_into_it(tmp_path: Path) -> None:
    # A counter below zero, or a sum that is inf (JSON null), made the whole file unreadable.
    path = tmp_path / "m.jsonl"
    page = b"x_total -3\nbig 1e308\nbig 1e308\nok 1\n"
    with MetricsPeer("page", page) as peer:
        scraper = _scrape_once(f"http://127.0.0.1:{peer.port}/metrics", path)
    assert scraper.scrapes == 1
    assert _written(path) == [{"ok": 1.0}]
    assert len(read_engine_metrics(path)) == 1


def test_a_401_that_echoes_a_key_leaves_it_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    said: list[str] = []
    run = tmp_path / "run.jsonl"

    async def bench(url: str) -> None:
        async with scraping(url, "http://127.0.0.1:9", run, said.append) as scraper:
            assert scraper is None

    caplog.set_level(logging.DEBUG)
    with MetricsPeer("unauthorized") as peer:
        asyncio.run(bench(f"http://user:{KEY}@127.0.0.1:{peer.port}/metrics?token={KEY}"))
    assert said
    assert "does not answer" in said[0]
    assert KEY not in "".join(said) + caplog.text
    assert not sidecar_path(run).exists()


def test_a_scrape_in_flight_when_the_run_ends_does_not_fail_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow engine (a page that comes at the end of the request's timeout, then its parse)
    # outlasted the wait at the end of the run: TimeoutError out of bench, the run's summary lost.
    monkeypatch.setattr(engine_metrics, "STOP_GRACE_S", 0.05)
    said: list[str] = []

    async def bench(url: str, peer: MetricsPeer) -> None:
        async with scraping(url, "http://127.0.0.1:9", tmp_path / "run.jsonl", said.append):
            while peer.requests < 2:  # the probe, then a scrape that hangs
                await asyncio.sleep(0.01)

    with MetricsPeer("once-then-hang") as peer:
        asyncio.run(bench(f"http://127.0.0.1:{peer.port}/metrics", peer))
    assert said
    assert "0 scrapes" in said[-1]


def test_the_gateway_cancels_a_scrape_in_flight_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (Before, it was left pending, its session closed under it, destroyed with the loop.)
    monkeypatch.setattr(upstream_metrics, "STOP_GRACE_S", 0.05)

    async def serve(peer: MetricsPeer) -> list[asyncio.Task[object]]:
        config = gateway_config(
            {"name": "hostile", "base_url": f"http://127.0.0.1:{peer.port}/v1"},
            recording={"enabled": True, "directory": str(tmp_path), "engine_metrics": True},
        )
        async with scraping_upstreams(config) as scrapers:
            assert len(scrapers) == 1
            while peer.requests < 2:
                await asyncio.sleep(0.01)
        return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]

    with MetricsPeer("once-then-hang") as peer:
        left = asyncio.run(serve(peer))
    assert left == []


def test_a_page_slow_to_read_is_read_less_often() -> None:
    # Reading a page holds the interpreter from the loop that relays the streams: an engine
    # whose page takes 1.8 s to read (8 MiB of tiny lines) was read again at once, for ever.
    assert next_wait(0.1, 0.02, 0.001) == pytest.approx(0.08)  # a page as engines send
    assert next_wait(0.1, 2.0, 1.8) == pytest.approx(16.2)  # reading: a tenth of the time
    assert next_wait(0.1, 0.3, 0.0) == 0.0  # a failed scrape that took long: none to wait
