"""Engine metrics pages are read fast, and off the loop that relays or measures the streams.

prometheus_client's parser took 28 ms for a vLLM endpoint's 40 KB page (12 histograms) and
2.5 s for a hostile 8 MiB one, every 100 ms, on the gateway's (or bench's) event loop: a
stall the tool itself added to every stream it was measuring.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aiohttp
import pytest

from steadystream import InputError, engine_metrics
from steadystream.engine_metrics import EngineScraper, parse_exposition
from steadystream.lab import LabServer
from tests.support.attribution import by_prometheus_client

# What prometheus_client reads, with what a parser may stumble on: quoted label values that
# hold '}', ',', spaces and escapes, a trailing comma, timestamps, +Inf, tabs, comments that
# look like samples, histograms (buckets dropped), summaries, untyped series.
TRICKY = "\n".join(
    [
        '# HELP vllm:e2e help with } and " and {a="b"} 3',
        "# TYPE vllm:e2e histogram",
        'vllm:e2e_bucket{le="0.1",model_name="m}, \\"q\\" \\\\ x"} 4.0',
        'vllm:e2e_bucket{le="+Inf",model_name="m}, \\"q\\" \\\\ x"} 5.0',
        'vllm:e2e_sum{model_name="m}, \\"q\\" \\\\ x",} 0.7 1700000000000',
        'vllm:e2e_count{model_name="m"}\t5',
        "# TYPE vllm:kv gauge",
        'vllm:kv{engine="0"} 0.25',
        'vllm:kv{engine="1"} 0.5',
        "# TYPE rpc summary",
        'rpc{quantile="0.5"} 1.5e-3',
        "rpc_sum 12",
        "rpc_count 7",
        "untyped_series -3",
        "# a comment: not_a_sample 99",
        "huge +Inf",
        "",
    ]
)


def test_the_page_reads_as_prometheus_client_reads_it() -> None:
    expected = by_prometheus_client(TRICKY)
    assert parse_exposition(TRICKY) == expected
    assert parse_exposition(TRICKY.encode()) == expected
    assert expected["vllm:kv"] == 0.75  # (summed over label sets)
    assert "vllm:e2e_bucket" not in expected


@pytest.mark.parametrize(
    ("line", "number"),
    [
        ('vllm:kv{engine="0" 0.5', 2),  # the labels never close
        ('vllm:kv{engine="0} 0.5', 2),  # nor the quote
        ("vllm:kv", 2),  # no value
        ("vllm:kv zero", 2),  # no number
        ("{this is json}", 2),
        ("9lives 1", 2),  # a name cannot start with a digit
    ],
)
def test_a_line_that_is_no_sample_is_named(line: str, number: int) -> None:
    with pytest.raises(InputError, match=f"not Prometheus text: line {number}"):
        parse_exposition("ok 1\n" + line + "\nok 2\n")


def test_the_series_kept_are_bounded() -> None:
    page = "".join(f"s{i} 1\n" for i in range(engine_metrics.MAX_SERIES + 500))
    assert len(parse_exposition(page)) == engine_metrics.MAX_SERIES


def test_the_scraper_reads_the_page_on_another_thread_than_its_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    parsed_on: list[threading.Thread] = []
    real = engine_metrics.parse_exposition

    def spy(text: str | bytes) -> dict[str, float]:
        parsed_on.append(threading.current_thread())
        return real(text)

    monkeypatch.setattr(engine_metrics, "parse_exposition", spy)

    async def scrape(url: str) -> tuple[threading.Thread, bool]:
        async with aiohttp.ClientSession() as session:
            scraper = EngineScraper(url, tmp_path / "m.jsonl", session)
            return threading.current_thread(), await scraper.probe()

    with LabServer("steady") as lab:
        loop_thread, answered = asyncio.run(scrape(f"{lab.url}/metrics"))
    assert answered
    assert parsed_on
    assert all(thread is not loop_thread for thread in parsed_on)
