"""Engine metrics scraped during a run: the sidecar file, and the scraper that writes it.

``bench --engine-metrics`` and the gateway scrape an engine's Prometheus endpoint every
100 ms while streams run and append one JSON line per scrape to a sidecar file next to the
timelines (``RUN.jsonl`` -> ``RUN.engine-metrics.jsonl``; the gateway writes one per upstream,
``engine-metrics-NAME.jsonl``, into its recording folder)::

    {"schema": "steadystream.engine-metrics/1", "t": 1767225600.123, "source": "http://...",
     "values": {"vllm:num_preemptions_total": 3.0, "vllm:kv_cache_usage_perc": 0.92, ...}}

``t`` is the scrape's wall-clock instant (unix seconds, the middle of the request), so it
joins timelines by their ``started_at``. Each series name is summed over its label sets
(one engine or several behind one endpoint); histogram buckets are dropped, their ``_sum``
and ``_count`` kept. ``explain`` reads the file back as
:class:`~steadystream.attribution.EngineSamples`.
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from steadystream._exceptions import InputError
from steadystream._validation import shown_url
from steadystream.attribution.engine import EngineSamples

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "SCHEMA",
    "SIDECAR_SUFFIX",
    "EngineScraper",
    "check_option",
    "gateway_metrics_path",
    "is_engine_metrics",
    "next_wait",
    "parse_exposition",
    "read_engine_metrics",
    "scrape_target",
    "scraping",
    "sidecar_path",
]

SCHEMA = "steadystream.engine-metrics/1"
MAX_SERIES = 2000  # names kept per scrape: a bound on what a hostile endpoint can make us store
MAX_BODY_BYTES = 8 << 20
# A scrape's line: at most MAX_SERIES values, each a name and a number (a longer line is no
# scrape this writes, and is not read whole into memory).
_MAX_LINE_BYTES = 16 << 20
DEFAULT_INTERVAL_S = 0.1
DEFAULT_TIMEOUT_S = 1.0
# How long the end of a run waits for the scrape in flight (a request, then its parse).
STOP_GRACE_S = DEFAULT_TIMEOUT_S + 1.0
# Reading a page holds the interpreter (a thread, but the GIL's) from the loop that relays or
# measures the streams: a page that takes long to read is read less often, so that reading
# takes at most a tenth of the time (an engine's 8 MiB of tiny lines costs ~2 s a read).
_READ_SHARE = 0.1
SIDECAR_SUFFIX = ".engine-metrics.jsonl"  # RUN.engine-metrics.jsonl beside RUN.jsonl
GATEWAY_PREFIX = "engine-metrics-"  # engine-metrics-NAME.jsonl in a gateway's recording folder


def sidecar_path(run: Path) -> Path:
    """Where the engine metrics of the timeline file ``run`` go (and are looked for)."""
    name = run.name
    for suffix in (".jsonl.gz", ".jsonl", ".parquet"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return run.with_name(f"{name}{SIDECAR_SUFFIX}")


def gateway_metrics_path(directory: Path, upstream: str) -> Path:
    """Where the gateway writes the engine metrics of its upstream named ``upstream``."""
    return directory / f"{GATEWAY_PREFIX}{upstream}.jsonl"


def is_engine_metrics(name: str) -> bool:
    """Whether a file name is one the engine metrics are written to (by bench or the gateway):
    they end in ``.jsonl`` like timelines, and a folder of runs is searched without them."""
    return name.endswith(SIDECAR_SUFFIX) or (
        name.startswith(GATEWAY_PREFIX) and name.endswith(".jsonl")
    )


# One sample line of Prometheus' text format (0.0.4): a name, then its labels (a quoted value
# may hold '}', ',' or spaces, and escapes) or at least a blank, the value, and an optional
# timestamp. Every quantifier is possessive and the groups atomic: what one part took
# is never handed back to the next, so the match is linear in the line. (Backtracking, a name
# ran into its value: ``abc123`` read as ``abc12`` = 3, and a hostile line like
# ``aaa...a b c d`` took 6 s for 16 KB, days for 8 MiB.)
_SAMPLE = re.compile(
    rb"[ \t]*+([a-zA-Z_:][a-zA-Z0-9_:]*+)"
    rb'(?>[ \t]*+\{(?:[^"}]++|"(?:[^"\\]++|\\.)*+")*+\}[ \t]*+|[ \t]++)'
    rb"([^ \t\r]++)(?:[ \t]++[^ \t\r]++)?+[ \t\r]*+"
)


def parse_exposition(text: str | bytes) -> dict[str, float]:
    """Prometheus text exposition -> one value per series name, summed over label sets.

    A line at a time with one compiled pattern: prometheus_client's parser took 28 ms for
    a vLLM endpoint's 40 KB (12 histograms) and 2.5 s for 8 MiB, every 100 ms, on the loop
    that relays the streams being measured. Raises :class:`InputError` at the first line
    that is no sample, comment or blank.
    """
    data = text.encode() if isinstance(text, str) else text
    values: dict[str, float] = {}
    sample = _SAMPLE.fullmatch
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line or line[:1] == b"#" or line.isspace():
            continue
        found = sample(line)
        if found is None:
            raise InputError(f"not Prometheus text: line {number} is no sample")
        name_bytes, value_bytes = found.groups()
        try:
            if b"_" in value_bytes:  # Python reads 1_000; Prometheus does not
                raise ValueError
            value = float(value_bytes)
        except ValueError:
            raise InputError(f"not Prometheus text: line {number} has no number") from None
        if not math.isfinite(value):
            continue
        name = name_bytes.decode()
        if name.endswith(("_bucket", "_created")):
            continue
        if value < 0 and name.endswith("_total"):
            continue  # no counter: the sidecar's reader would refuse the whole file for it
        if name not in values and len(values) >= MAX_SERIES:
            continue
        values[name] = values.get(name, 0.0) + value
    # A sum can overflow (1e308 twice): JSON has no inf, it would be written as null.
    return {name: value for name, value in values.items() if math.isfinite(value)}


def read_engine_metrics(path: Path) -> EngineSamples:
    """Read a sidecar file. A line cut off at the end (an interrupted run) is skipped;
    any other bad line is an :class:`InputError` naming it."""
    if path.exists() and not path.is_file():  # (a FIFO would hang the read, /dev/zero never end)
        raise InputError(f"{path}: not a regular file; expected engine metrics")
    scrapes: list[tuple[float, dict[str, float]]] = []
    try:
        with path.open("rb") as file:  # a line at a time: never the whole file in memory
            for number, line in enumerate(iter(lambda: file.readline(_MAX_LINE_BYTES + 1), b""), 1):
                if len(line) > _MAX_LINE_BYTES:
                    raise InputError(
                        f"{path}: line {number} is longer than {_MAX_LINE_BYTES >> 20} MiB;"
                        " not engine metrics"
                    )
                if not line.strip():
                    continue
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    if not line.endswith(b"\n"):  # cut off mid-line: keep what came before
                        break
                    raise InputError(f"{path}: line {number} is not JSON: {exc}") from exc
                scrapes.append(_scrape(record, path, number))
    except OSError as exc:
        raise InputError(f"{path}: cannot read engine metrics: {exc.strerror}") from exc
    return EngineSamples.from_scrapes(scrapes)


def _scrape(record: object, path: Path, number: int) -> tuple[float, dict[str, float]]:
    where = f"{path}: line {number}"
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected an object")
    if record.get("schema") != SCHEMA:
        raise InputError(
            f"{where}: field 'schema' must be {SCHEMA!r}, got {record.get('schema')!r}"
        )
    t = record.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
        raise InputError(f"{where}: field 't' must be unix seconds, got {t!r}")
    values = record.get("values")
    if not isinstance(values, dict):
        raise InputError(f"{where}: field 'values' must be an object")
    clean: dict[str, float] = {}
    for name, value in values.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InputError(f"{where}: field 'values.{name}' must be a number, got {value!r}")
        if value < 0 and str(name).endswith("_total"):
            # A Prometheus counter never goes below zero; this is not a scrape.
            raise InputError(f"{where}: field 'values.{name}' is a counter below zero: {value!r}")
        clean[str(name)] = float(value)
    return float(t), clean


class EngineScraper:
    """Scrape ``url`` every ``interval_s`` into ``path`` until stopped.

    ``session`` is an aiohttp ``ClientSession`` passed in (the caller owns it). A scrape
    that fails or times out is counted and skipped; scraping never fails a run.
    """

    def __init__(
        self,
        url: str,
        path: Path,
        session: object,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        wall_clock: Callable[[], float] = time.time,
        shared: bool = False,
    ) -> None:
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive")
        self.url = url
        self.path = path
        self.scrapes = 0
        self.failures = 0
        self._session = session
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._wall = wall_clock
        self._source = shown_url(url)
        # Several processes scrape into ``path`` (a gateway's workers): only the one that
        # holds the file's lock does; when it ends, the next to try takes over.
        self._shared = shared
        self._read_s = 0.0  # how long the last page took to read (parse)

    async def probe(self) -> bool:
        """Whether the endpoint answers with Prometheus text now."""
        return await self._fetch() is not None

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape until ``stop`` is set; each line is flushed as it is written.

        A file of its own (a bench run's sidecar) starts empty, as the run's file does: the
        scrapes of an earlier run into the same output would be read as this run's. A shared
        file (a gateway's workers, restarts) is appended to, and whoever takes its lock first
        drops a line an earlier writer left cut (it died mid-write): written after, it
        would be a bad line in the middle, and no reader could read past it.
        """
        mode = os.O_APPEND if self._shared else os.O_TRUNC
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | mode, 0o644)
        holding = not self._shared
        try:
            while not stop.is_set():
                began = time.monotonic()
                if not holding and _locked(fd):
                    holding = True
                    _drop_cut_line(fd)
                if holding:
                    self._read_s = 0.0
                    await self._scrape_into(fd)
                wait = next_wait(self._interval_s, time.monotonic() - began, self._read_s)
                if wait > 0:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), wait)
        finally:
            os.close(fd)

    async def _scrape_into(self, fd: int) -> None:
        scraped = await self._fetch()
        if scraped is None:
            self.failures += 1
            return
        t, values = scraped
        line = {"schema": SCHEMA, "t": t, "source": self._source, "values": values}
        os.write(fd, orjson.dumps(line) + b"\n")
        self.scrapes += 1

    async def _fetch(self) -> tuple[float, dict[str, float]] | None:
        import aiohttp

        session: aiohttp.ClientSession = self._session  # type: ignore[assignment]
        sent = self._wall()
        try:
            timeout = aiohttp.ClientTimeout(total=self._timeout_s)
            # A redirect is not followed: the engine would choose what we fetch, and where.
            async with session.get(self.url, timeout=timeout, allow_redirects=False) as response:
                if response.status != 200:
                    return None
                body = await _page(response)
            if body is None:
                return None
            received = self._wall()
            # Off the loop: the streams it relays or measures must not wait on a large page.
            began = time.monotonic()
            try:
                return (sent + received) / 2, await asyncio.to_thread(parse_exposition, body)
            finally:
                self._read_s = time.monotonic() - began
        except (aiohttp.ClientError, TimeoutError, InputError, UnicodeError):
            return None


def next_wait(interval_s: float, took_s: float, read_s: float) -> float:
    """Seconds until the next scrape: the rest of the interval, and at least long enough
    that reading pages (``read_s`` the last one) takes :data:`_READ_SHARE` of the time."""
    return max(interval_s - took_s, read_s * (1 / _READ_SHARE - 1))


async def _page(response: aiohttp.ClientResponse) -> bytes | None:
    """The whole body, or None for one longer than ``MAX_BODY_BYTES``. (One ``read`` returns
    what has come so far: a page in several packets would be read cut, as other values.)"""
    if (response.content_length or 0) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await response.content.read(MAX_BODY_BYTES + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
    return b"".join(chunks)


def _drop_cut_line(fd: int) -> None:
    """Cut the file at its last line end, if something follows it (a writer died mid-line)."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = max(0, size - _MAX_LINE_BYTES)
    tail = os.pread(fd, size - start, start)
    os.ftruncate(fd, start + tail.rfind(b"\n") + 1)


def _locked(fd: int) -> bool:
    """Take ``fd``'s exclusive lock if nobody holds it (kept until ``fd`` is closed)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def check_option(option: str) -> str:
    """``--engine-metrics``: ``auto``, ``off`` or an http(s) URL; anything else is refused."""
    if option not in ("auto", "off") and not option.startswith(("http://", "https://")):
        raise InputError(
            f"--engine-metrics: expected auto, off or an http(s) URL, got {shown_url(option)!r}"
        )
    return option


def scrape_target(option: str | None, origin: str) -> str | None:
    """The URL that ``--engine-metrics`` names: None (off), ``auto`` (the server's own
    ``/metrics``), or a URL given outright."""
    if option is None or check_option(option) == "off":
        return None
    if option == "auto":
        return f"{origin.rstrip('/')}/metrics"
    return option


@asynccontextmanager
async def scraping(
    option: str | None, origin: str, run: Path, say: Callable[[str], None]
) -> AsyncIterator[EngineScraper | None]:
    """Scrape while the body runs, into ``run``'s sidecar; ``auto`` only if it answers."""
    url = scrape_target(option, origin)
    if url is None:
        yield None
        return
    import aiohttp

    async with aiohttp.ClientSession() as session:
        scraper = EngineScraper(url, sidecar_path(run), session)
        if not await scraper.probe():
            say(
                f"engine metrics: {shown_url(url)} does not answer with Prometheus text;"
                " not scraped"
            )
            yield None
            return
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        try:
            yield scraper
        finally:
            stop.set()
            # A scrape still in flight is cancelled: a slow engine does not fail the run.
            with suppress(TimeoutError):
                await asyncio.wait_for(task, STOP_GRACE_S)
            say(
                f"engine metrics: {scraper.scrapes} scrapes of {shown_url(url)} to"
                f" {scraper.path} ({scraper.failures} failed)"
            )
