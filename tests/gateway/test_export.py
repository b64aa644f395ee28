"""Prometheus metrics: buckets, bulk observation, per-stream numbers from the timelines."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from steadystream import Where
from steadystream._histogram import FastHistogram
from steadystream.gateway.export import GAP_BUCKETS, GatewayMetrics, added_latency_s
from steadystream.metrics import stream_metrics
from tests.support.timelines import make_timeline, reasoning_timeline


def samples(metrics: GatewayMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_buckets_tell_33ms_from_50ms_from_400ms() -> None:
    for bound in (0.033, 0.05, 0.4):
        assert bound in GAP_BUCKETS


def test_a_value_on_a_bound_goes_into_that_bucket_as_prometheus_does() -> None:
    histogram = FastHistogram("h", "doc", ("x",), (0.01, 0.05))
    histogram.observe(("a",), [0.01, 0.02, 0.05, 0.2, float("nan")])
    family = histogram.collect()
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "h_bucket"}
    assert buckets == {"0.01": 1.0, "0.05": 3.0, "+Inf": 4.0}
    count = next(s.value for s in family.samples if s.name == "h_count")
    assert count == 4.0
    with pytest.raises(ValueError, match="increasing"):
        FastHistogram("h", "doc", (), (0.5, 0.1))


def test_one_stream_observed_at_both_edges() -> None:
    metrics = GatewayMetrics(CollectorRegistry())
    up = make_timeline([100, 133, 166, 566], where=Where.GATEWAY_UPSTREAM)
    down = make_timeline([101, 134, 167, 567], where=Where.GATEWAY_DOWNSTREAM)
    metrics.observe_stream(("m", "chat", "t", "lab"), (up, down), duration_s=0.6)
    got = samples(metrics)
    labels = {"model": "m", "route": "chat", "tenant": "t", "upstream": "lab"}

    def value(name: str, **extra: str) -> float:
        return got[(name, frozenset({**labels, **extra}.items()))]

    for edge in ("upstream", "downstream"):
        assert value("steadystream_gap_seconds_count", edge=edge) == 3
        assert value("steadystream_stream_max_gap_seconds_count", edge=edge) == 1
        assert value("steadystream_gap_seconds_bucket", edge=edge, le="0.035") == 2  # 33 ms
        assert value("steadystream_gap_seconds_bucket", edge=edge, le="0.35") == 2
        assert value("steadystream_gap_seconds_bucket", edge=edge, le="0.4") == 3  # 400 ms
    max_gap = stream_metrics(down).max_gap_s
    assert max_gap is not None
    assert value("steadystream_stream_max_gap_seconds_sum", edge="downstream") == pytest.approx(
        max_gap
    )
    assert value("steadystream_ttft_seconds_sum", edge="upstream") == pytest.approx(0.1)
    assert value("steadystream_request_duration_seconds_count") == 1
    assert value("steadystream_output_tokens_sum") == 4
    # Every content event was handed on 1 ms after it arrived (the role event at once): the
    # gateway's own latency, event by event.
    assert value("steadystream_added_latency_seconds_count") == 5
    assert value("steadystream_added_latency_seconds_sum") == pytest.approx(0.004)
    assert value("steadystream_added_latency_seconds_bucket", le="0.001") == 5
    assert value("steadystream_added_latency_seconds_bucket", le="0.0005") == 1


def test_ttft_is_the_first_visible_token_and_ttfr_the_first_reasoning_token() -> None:
    metrics = GatewayMetrics(CollectorRegistry())
    thinking = ("m", "chat", "t", "lab")
    up = reasoning_timeline([300, 320], [900, 920], where=Where.GATEWAY_UPSTREAM)
    down = reasoning_timeline([301, 321], [901, 921], where=Where.GATEWAY_DOWNSTREAM)
    metrics.observe_stream(thinking, (up, down), duration_s=1.0)
    plain = ("m", "chat", "u", "lab")  # a stream that did not reason: no TTFR observed
    metrics.observe_stream(plain, (make_timeline([100, 120]),), duration_s=0.2)
    got = samples(metrics)

    def value(name: str, labels: tuple[str, ...], **extra: str) -> float | None:
        keys = dict(zip(("model", "route", "tenant", "upstream"), labels, strict=True))
        return got.get((name, frozenset({**keys, **extra}.items())))

    for edge, ttfr, ttft in (("upstream", 0.300, 0.900), ("downstream", 0.301, 0.901)):
        assert value("steadystream_ttfr_seconds_count", thinking, edge=edge) == 1
        assert value("steadystream_ttfr_seconds_sum", thinking, edge=edge) == pytest.approx(ttfr)
        assert value("steadystream_ttft_seconds_sum", thinking, edge=edge) == pytest.approx(ttft)
        # the same buckets as TTFT's: 0.3 s is in the 0.4 s bucket, 0.9 s is not
        bucket = value("steadystream_ttfr_seconds_bucket", thinking, edge=edge, le="0.4")
        assert bucket == 1
        assert value("steadystream_ttft_seconds_bucket", thinking, edge=edge, le="0.4") == 0
    assert value("steadystream_ttft_seconds_count", plain, edge="upstream") == 1
    assert value("steadystream_ttfr_seconds_count", plain, edge="upstream") is None


def test_streams_observed_in_one_batch_read_as_if_observed_one_by_one() -> None:
    streams = []
    for i in range(40):  # more than one batch, several label sets, one-edge streams too
        labels = ("m", "chat", f"t{i % 3}", "lab")
        gaps = [100 + i, 133 + i, 166 + 7 * i, 566 + 11 * i]
        up = make_timeline(gaps, where=Where.GATEWAY_UPSTREAM)
        down = make_timeline([g + 1 + i % 4 for g in gaps], where=Where.GATEWAY_DOWNSTREAM)
        streams.append((labels, (up, down) if i % 5 else (down,), 0.5 + i / 10))
    one_by_one, batched = GatewayMetrics(CollectorRegistry()), GatewayMetrics(CollectorRegistry())
    for labels, edges, duration in streams:
        one_by_one.observe_stream(labels, edges, duration_s=duration)
        one_by_one.flush()
        batched.observe_stream(labels, edges, duration_s=duration)
    # Reading the metrics brings in what is pending: nothing reads stale.
    got, expected = samples(batched), samples(one_by_one)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key
    assert (
        expected[
            (
                "steadystream_request_duration_seconds_count",
                frozenset(
                    {"model": "m", "route": "chat", "tenant": "t0", "upstream": "lab"}.items()
                ),
            )
        ]
        == 14
    )


def test_added_latency_needs_events_that_pair() -> None:
    up = make_timeline([100, 133, 166], where=Where.GATEWAY_UPSTREAM, role_ms=None)
    paced = make_timeline([150, 300], where=Where.GATEWAY_DOWNSTREAM, role_ms=None)  # merged
    assert len(added_latency_s(up, paced)) == 0
    relayed = make_timeline([100.2, 133.5, 167], where=Where.GATEWAY_DOWNSTREAM, role_ms=None)
    assert added_latency_s(up, relayed) == pytest.approx([0.0002, 0.0005, 0.001])


def _observed(metrics: GatewayMetrics, streams: int) -> None:
    labels = ("m", "chat", "", "lab")
    for _ in range(streams):
        up = make_timeline([0, 10, 20], where=Where.GATEWAY_UPSTREAM)
        down = make_timeline([1, 11, 21], where=Where.GATEWAY_DOWNSTREAM)
        metrics.observe_stream(labels, (up, down), duration_s=0.5)
        metrics.streams.labels(*labels, "complete").inc()


def test_a_scrape_is_rendered_on_a_thread_from_a_copy_taken_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import threading

    import steadystream.gateway.export as export

    metrics = GatewayMetrics(CollectorRegistry())
    _observed(metrics, 3)
    expected = metrics.exposition()
    release = threading.Event()
    rendered_on: list[threading.Thread] = []
    real = export.generate_latest

    def slow(registry: CollectorRegistry) -> bytes:
        rendered_on.append(threading.current_thread())
        assert release.wait(10)  # the loop must go on meanwhile, or this never returns
        return real(registry)

    monkeypatch.setattr(export, "generate_latest", slow)

    async def scrape_while_serving() -> tuple[bytes, bytes, bytes, int]:
        first = asyncio.ensure_future(metrics.render())
        await asyncio.sleep(0.01)
        # The loop serves on while the text is made: a stream ends, and is not in this scrape;
        # two scrapes that come now must see it (they share the next text, not this one).
        _observed(metrics, 1)
        second = asyncio.ensure_future(metrics.render())
        third = asyncio.ensure_future(metrics.render())
        await asyncio.sleep(0.01)
        release.set()
        return await first, await second, await third, len(rendered_on)

    first, second, third, renders = asyncio.run(scrape_while_serving())
    assert first == expected
    assert second == third == metrics.exposition() != first
    assert renders == 2  # one text at a time: the two later scrapes shared one
    assert all(thread is not threading.main_thread() for thread in rendered_on[:renders])
    monkeypatch.setattr(export, "generate_latest", real)
    after = samples(metrics)
    assert (
        after[("steadystream_gap_seconds_count", frozenset([*_LABELS, ("edge", "upstream")]))] == 8
    )


_LABELS = [("model", "m"), ("route", "chat"), ("tenant", ""), ("upstream", "lab")]


def test_a_copy_of_the_histograms_does_not_move_with_them() -> None:
    metrics = GatewayMetrics(CollectorRegistry())
    _observed(metrics, 2)
    view = metrics.view()
    _observed(metrics, 5)
    key = ("steadystream_gap_seconds_count", frozenset([*_LABELS, ("edge", "downstream")]))

    def count(registry: CollectorRegistry) -> float:
        for family in registry.collect():
            for s in family.samples:
                if (s.name, frozenset(s.labels.items())) == key:
                    return float(s.value)
        raise AssertionError("no such sample")

    assert count(view) == 2 * 2  # two gaps per stream, as of the copy
    assert count(metrics.view()) == 7 * 2
    # The counters too: a snapshot is one instant, whenever a thread collects it.
    streams = {
        s.value for f in view.collect() for s in f.samples if s.name == "steadystream_streams_total"
    }
    assert streams == {2.0}
