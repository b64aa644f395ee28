"""Peers' result files read as timelines: each format's streams, found by content or named.

The fixtures in tests/data/peers/ are built from each tool's documented fields (vLLM's
vllm/benchmarks/serve.py, GenAI-Perf's perf_analyzer profile export), and AIPerf's are two
records of a real AIPerf 0.13.0 run against the lab (a 1.5 s freeze after 20 tokens).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from steadystream import TimelineFormatError, TokenSource, read_timelines
from steadystream.files.peers import PEER_FORMATS, detect_format, read_peer
from steadystream.metrics import stream_table
from tests.support.peers import DATA, gaps_ns

MS = 1_000_000


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm_bench_detailed.json", "vllm"),
        ("aiperf_profile_export.jsonl", "aiperf"),
        ("aiperf_profile_export_raw.jsonl", "aiperf-raw"),
        ("genai_perf_profile_export.json", "genai-perf"),
        ("guidellm_benchmarks.json", "guidellm"),
        ("llmperf_individual_responses.json", "llmperf"),
        ("llmperf_summary.json", "llmperf"),
    ],
)
def test_each_file_is_told_by_its_content(name: str, expected: str) -> None:
    assert detect_format(DATA / name) == expected


def test_a_timeline_file_is_told_as_ours(tmp_path: Path) -> None:
    from steadystream import write_timelines

    run = read_timelines(DATA / "vllm_bench_detailed.json").timelines
    path = tmp_path / "run.jsonl"
    write_timelines(path, run)
    assert detect_format(path) == "steadystream"
    assert read_timelines(path).timelines == run  # what an import writes reads back


def test_vllm_gaps_are_its_itls_exactly() -> None:
    run = read_timelines(DATA / "vllm_bench_detailed.json").timelines
    assert [t.stream_id for t in run] == ["vllm-0", "vllm-1", "vllm-2", "vllm-3"]
    freeze = run[1]
    assert gaps_ns(freeze).tolist() == [20 * MS, 21 * MS, 1500 * MS, 20 * MS, 19 * MS]
    assert int(freeze.times[0]) == 101 * MS  # the first chunk at the TTFT
    assert freeze.labels == {"model": "lab"}
    assert freeze.usage == {"prompt_tokens": 32, "completion_tokens": 6}
    assert freeze.token_source is TokenSource.USAGE_ONE_PER_EVENT
    assert freeze.texts is None
    assert freeze.first_byte_ns is None
    assert not freeze.wire_bytes.any()  # unknown, as the data model marks it
    assert freeze.meta["peer"] == {"format": "vllm", "request": 1, "start_s": 5012.26}
    row = stream_table(run).row(1)
    assert row.max_gap_s == pytest.approx(1.5)
    assert row.ttft_s == pytest.approx(0.101)


def test_vllm_more_chunks_than_tokens_keeps_every_chunk() -> None:
    # vLLM counts a chat stream's role and finish chunks: 7 chunks for 6 tokens.
    extra = read_timelines(DATA / "vllm_bench_detailed.json").timelines[2]
    assert len(extra) == 7
    assert extra.token_source is TokenSource.USAGE_EVEN
    assert extra.tokens.tolist() == [1] * 7
    assert int(extra.text_mask.sum()) == 7  # every timed chunk is a text event: no gap lost


def test_vllm_failed_request_is_kept_with_its_error_and_no_key() -> None:
    failed = read_timelines(DATA / "vllm_bench_detailed.json").timelines[3]
    assert failed.outcome == "error"
    assert len(failed) == 0
    assert failed.error is not None
    assert "Bad Request" in failed.error
    assert "sk-test" not in failed.error
    assert "Bearer" not in failed.error
    assert failed.error == "Bad Request: Authorization: *** rejected"


def test_aiperf_records_and_raw_give_the_same_gaps_as_aiperf() -> None:
    import orjson

    records = read_timelines(DATA / "aiperf_profile_export.jsonl").timelines
    raw = read_timelines(DATA / "aiperf_profile_export_raw.jsonl").timelines
    lines = (DATA / "aiperf_profile_export.jsonl").read_bytes().splitlines()
    assert len(records) == len(raw) == len(lines) == 2
    for line, record, received in zip(lines, records, raw, strict=True):
        export = orjson.loads(line)
        icl = np.rint(np.array(export["metrics"]["inter_chunk_latency"]["value"]) * MS)
        assert record.stream_id == received.stream_id == export["metadata"]["x_request_id"]
        assert gaps_ns(record).tolist() == icl.astype(np.int64).tolist()
        assert gaps_ns(received).tolist() == gaps_ns(record).tolist()
        assert record.started_at == export["metadata"]["request_start_ns"] / 1e9
        assert int(gaps_ns(record).max()) > 1400 * MS  # the lab's injected freeze
    # The raw export keeps each event's text: role, finish, usage and [DONE] are no tokens.
    assert raw[0].token_source is TokenSource.USAGE_ONE_PER_EVENT
    assert raw[0].total_tokens == 40
    assert raw[0].texts is None
    assert "".join(map(str, raw[0].kinds[-4:])) != ""  # events after the text are kept
    assert records[0].token_source is TokenSource.USAGE_ONE_PER_EVENT


def test_genai_perf_responses_are_events_with_their_kinds() -> None:
    run = read_timelines(DATA / "genai_perf_profile_export.json").timelines
    assert [t.stream_id for t in run] == ["genai-perf-0-0", "genai-perf-0-1"]
    paused, steady = run
    assert gaps_ns(paused).tolist() == [
        20 * MS,
        21 * MS,
        19 * MS,
        1200 * MS,
        20 * MS,
        22 * MS,
        20 * MS,
    ]
    assert int(paused.times[0]) == 150 * MS
    assert paused.usage == {"prompt_tokens": 12, "completion_tokens": 8}
    assert paused.token_source is TokenSource.USAGE_ONE_PER_EVENT
    assert paused.started_at == pytest.approx(1795870000.0)
    assert paused.meta["peer"] == {
        "format": "genai-perf",
        "experiment": 0,
        "mode": "concurrency",
        "value": 2,
        "request": 0,
    }
    # No usage chunk: the counts are estimated from the text, as for a stream recorded here.
    assert steady.token_source is TokenSource.ESTIMATED
    assert gaps_ns(steady).tolist() == [25 * MS] * 4


@pytest.mark.parametrize("name", ["guidellm_benchmarks.json", "llmperf_individual_responses.json"])
def test_aggregate_only_files_say_what_is_missing(name: str) -> None:
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(DATA / name)
    message = str(caught.value)
    assert "no stream's gaps can be rebuilt" in message
    assert "Missing: a list of every chunk's arrival per request" in message
    assert "--save-detailed" in message  # and what to import instead


def test_a_named_format_is_read_as_that_format() -> None:
    named = read_timelines(DATA / "vllm_bench_detailed.json", format="vllm").timelines
    assert [t.stream_id for t in named][:1] == ["vllm-0"]
    with pytest.raises(TimelineFormatError, match="without ttfts and itls"):
        read_timelines(DATA / "genai_perf_profile_export.json", format="vllm")
    with pytest.raises(Exception, match="unknown format 'jmeter'"):
        read_timelines(DATA / "vllm_bench_detailed.json", format="jmeter")
    assert set(PEER_FORMATS) == {"vllm", "aiperf", "aiperf-raw", "genai-perf"}


def test_an_unknown_json_file_names_what_is_read(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"hello": "world"}')
    with pytest.raises(Exception, match=r"unknown timeline file suffix.*vllm, aiperf"):
        read_timelines(path)


def test_read_peer_streams_a_gzip_export(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "profile_export.jsonl.gz"
    path.write_bytes(gzip.compress((DATA / "aiperf_profile_export.jsonl").read_bytes()))
    assert detect_format(path) == "aiperf"
    assert len(read_peer(path, "aiperf").timelines) == 2


def test_unknown_token_counts_leave_every_token_metric_none(tmp_path: Path) -> None:
    import json

    record = json.loads((DATA / "aiperf_profile_export.jsonl").read_text().splitlines()[0])
    for name in ("output_token_count", "usage_completion_tokens", "output_sequence_length"):
        record["metrics"].pop(name, None)
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (stream,) = read_timelines(path).timelines
    assert stream.token_source is TokenSource.UNKNOWN
    row = stream_table([stream]).row(0)
    assert row.output_tokens is None
    assert row.tpot_s is None
    assert row.tokens_per_chunk is None
    assert row.qoe is None
    assert row.fluidity is None
    assert row.max_gap_s is not None
    assert row.max_gap_s > 1.4  # the gaps are all there


@pytest.mark.parametrize(
    ("chunks", "total", "expected"),
    [(4, 10, [3, 3, 2, 2]), (3, 3, [1, 1, 1]), (5, 3, [1, 1, 1, 1, 1]), (0, 5, [])],
)
def test_a_total_is_spread_evenly(chunks: int, total: int, expected: list[int]) -> None:
    from steadystream.files.peers._requests import even_tokens

    assert even_tokens(chunks, total).tolist() == expected
