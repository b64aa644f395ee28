"""The engine-metrics sidecar: parsing, reading back, and the scraper against a real lab."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest

from steadystream._exceptions import InputError
from steadystream._validation import shown_url
from steadystream.engine_metrics import (
    SCHEMA,
    EngineScraper,
    parse_exposition,
    read_engine_metrics,
    scrape_target,
    sidecar_path,
)
from steadystream.lab import LabServer

EXPOSITION = """\
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="a"} 2.0
vllm:num_preemptions_total{engine="1",model_name="a"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.1"} 4.0
vllm:inter_token_latency_seconds_bucket{le="+Inf"} 5.0
vllm:inter_token_latency_seconds_count 5.0
vllm:inter_token_latency_seconds_sum 0.7
"""


def test_series_are_summed_over_labels_and_buckets_dropped() -> None:
    values = parse_exposition(EXPOSITION)
    assert values == {
        "vllm:num_preemptions_total": 5.0,
        "vllm:kv_cache_usage_perc": 0.5,
        "vllm:inter_token_latency_seconds_count": 5.0,
        "vllm:inter_token_latency_seconds_sum": 0.7,
    }


def test_not_prometheus_text_is_an_input_error() -> None:
    with pytest.raises(InputError, match="not Prometheus text"):
        parse_exposition("{this is json}")


def test_sidecar_sits_next_to_the_run() -> None:
    assert sidecar_path(Path("out/run.jsonl")) == Path("out/run.engine-metrics.jsonl")
    assert sidecar_path(Path("run.jsonl.gz")) == Path("run.engine-metrics.jsonl")
    assert sidecar_path(Path("run.parquet")) == Path("run.engine-metrics.jsonl")


def line(t: float, **values: float) -> bytes:
    return orjson.dumps({"schema": SCHEMA, "t": t, "values": values}) + b"\n"


def test_read_back_keeps_everything_before_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(line(2.0, a=3.0) + line(1.0, a=1.0) + b'{"schema": "steadystream.eng')
    samples = read_engine_metrics(path)
    assert list(samples.times_s) == [1.0, 2.0]  # sorted by time
    assert samples.increase("a", 1.0, 2.0) == 2.0
    assert samples.peak("a", 0.0, 5.0) == 3.0
    assert samples.increase("a", 0.5, 2.0) is None  # no scrape before the window


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"schema": "other/1", "t": 1.0, "values": {}}, "schema"),
        ({"schema": SCHEMA, "t": "soon", "values": {}}, "'t'"),
        ({"schema": SCHEMA, "t": 1.0, "values": []}, "'values'"),
        ({"schema": SCHEMA, "t": 1.0, "values": {"x": "1"}}, "values.x"),
    ],
)
def test_a_bad_line_names_its_field(tmp_path: Path, record: object, field: str) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(orjson.dumps(record) + b"\n" + line(2.0))
    with pytest.raises(InputError, match=f"line 1.*{field}"):
        read_engine_metrics(path)


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read engine metrics"):
        read_engine_metrics(tmp_path / "nope.jsonl")


def test_counter_reset_counts_from_zero() -> None:
    from steadystream.attribution import EngineSamples

    samples = EngineSamples.from_scrapes([(1.0, {"c": 10.0}), (2.0, {"c": 2.0})])
    assert samples.increase("c", 1.0, 2.0) == 2.0


def test_targets_and_redaction() -> None:
    assert scrape_target(None, "http://h:1") is None
    assert scrape_target("off", "http://h:1") is None
    assert scrape_target("auto", "http://h:1/") == "http://h:1/metrics"
    assert scrape_target("https://e/m", "http://h:1") == "https://e/m"
    with pytest.raises(InputError, match="--engine-metrics"):
        scrape_target("metrics", "http://h:1")
    assert shown_url("http://user:secret@h:1/metrics?token=abc") == "http://***@h:1/metrics?***"


def scrape_for(url: str, path: Path, seconds: float) -> tuple[EngineScraper, bool]:
    """Scrape ``url`` every 20 ms for ``seconds``; the scraper and whether it answered first."""

    async def scrape() -> tuple[EngineScraper, bool]:
        async with aiohttp.ClientSession() as session:
            scraper = EngineScraper(url, path, session, interval_s=0.02)
            answered = await scraper.probe()
            stop = asyncio.Event()
            task = asyncio.create_task(scraper.run(stop))
            await asyncio.sleep(seconds)
            stop.set()
            await asyncio.wait_for(task, 2)
            return scraper, answered

    return asyncio.run(scrape())


def test_the_scraper_records_the_labs_vllm_series(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    with LabServer("steady") as lab:
        scraper, answered = scrape_for(f"{lab.url}/metrics", path, 0.2)
    assert answered
    assert scraper.scrapes >= 3
    records = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert len(records) == scraper.scrapes
    assert records[0]["source"].endswith("/metrics")
    assert "vllm:num_preemptions_total" in records[0]["values"]
    assert "vllm:prompt_tokens_total" in records[0]["values"]
    assert len(read_engine_metrics(path)) == scraper.scrapes


def test_a_dead_endpoint_is_counted_not_fatal(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/metrics"  # no server there (a port free a moment ago may be)
    scraper, answered = scrape_for(url, tmp_path / "m.jsonl", 0.1)
    assert not answered
    assert scraper.scrapes == 0
    assert scraper.failures >= 2


def test_scrapers_sharing_a_file_take_turns_and_never_both_write(tmp_path: Path) -> None:
    # A gateway's workers each run a scraper of every upstream into the same file: one of
    # them scrapes (the file's lock); when it ends, another takes over.
    path = tmp_path / "engine-metrics-lab.jsonl"

    async def take_turns(url: str) -> tuple[int, int, int, int]:
        async with aiohttp.ClientSession() as session:
            first, second = (
                EngineScraper(url, path, session, interval_s=0.02, shared=True) for _ in range(2)
            )
            stop_first, stop_second = asyncio.Event(), asyncio.Event()
            running_first = asyncio.create_task(first.run(stop_first))
            await asyncio.sleep(0.05)
            running_second = asyncio.create_task(second.run(stop_second))
            await asyncio.sleep(0.2)
            while_first = second.scrapes
            stop_first.set()
            await asyncio.wait_for(running_first, 2)
            await asyncio.sleep(0.2)
            stop_second.set()
            await asyncio.wait_for(running_second, 2)
            return first.scrapes, while_first, second.scrapes, second.failures

    with LabServer("steady") as lab:
        first, while_first, second, failures = asyncio.run(take_turns(f"{lab.url}/metrics"))
    assert first >= 3
    assert while_first == 0  # the lock was taken: it neither scraped nor counted a failure
    assert failures == 0
    assert second >= 3  # it took over once the first ended
    assert len(path.read_bytes().splitlines()) == first + second
