"""A hostile peer's file, from a review of the importers: numbers too large for any stream,
credentials in the shapes peers' error strings take, and records the peers write that the
importers first got wrong (a vLLM request that failed with no message, AIPerf's null
metrics, GenAI-Perf against Triton's generate endpoint)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from steadystream import TimelineFormatError, read_timelines
from steadystream.files.peers._requests import scrub_error
from tests.support.peers import DATA


def _vllm(tmp_path: Path, **changes: Any) -> Path:
    document = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    document.update(changes)
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(document))
    return path


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _refused(path: Path, fmt: str | None = None) -> TimelineFormatError:
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(path, format=fmt)
    return caught.value


# -- numbers no stream has: a clear error, never an overflow or times that run backwards ------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"itls": [[1e300, 0.02], [0.02], [0.03], []]}, "itls"),
        ({"itls": [[1e10] * 5, [0.02], [0.03], []]}, "itls"),  # each a century, summed past int64
        ({"ttfts": [1e300, 0.1, 0.1, 0.0]}, "ttfts"),
        ({"ttfts": [10**30, 0.1, 0.1, 0.0]}, "ttfts"),
    ],
)
def test_vllm_times_past_any_stream_are_refused(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    error = _refused(_vllm(tmp_path, **change))
    assert error.field == field
    assert "request 0" in str(error)


@pytest.mark.parametrize(
    ("metric", "value"),
    [("inter_chunk_latency", [1e300, 20.0]), ("time_to_first_token", 1e300),
     ("request_latency", 1e300), ("time_to_first_token", 10**30)],
)  # fmt: skip
def test_aiperf_times_past_any_stream_are_refused(tmp_path: Path, metric: str, value: Any) -> None:
    records = _lines("aiperf_profile_export.jsonl")
    records[0]["metrics"][metric]["value"] = value
    error = _refused(_jsonl(tmp_path / "profile_export.jsonl", records))
    assert error.field == f"metrics.{metric}"
    assert error.line == 1


def test_aiperf_start_stamp_past_any_clock_is_refused(tmp_path: Path) -> None:
    records = _lines("aiperf_profile_export.jsonl")
    records[0]["metadata"]["request_start_ns"] = 10**40
    error = _refused(_jsonl(tmp_path / "profile_export.jsonl", records))
    assert error.field == "metadata.request_start_ns"


@pytest.mark.parametrize("start", [-(10**18), 2**63 + 5])
def test_aiperf_raw_start_off_the_clock_is_refused(tmp_path: Path, start: int) -> None:
    records = _lines("aiperf_profile_export_raw.jsonl")
    records[0]["start_perf_ns"] = start
    error = _refused(_jsonl(tmp_path / "raw.jsonl", records))
    assert error.field == "start_perf_ns"


def test_aiperf_raw_chunk_a_century_late_is_refused(tmp_path: Path) -> None:
    records = _lines("aiperf_profile_export_raw.jsonl")
    last = records[0]["responses"][-1]
    last["perf_ns"] = records[0]["start_perf_ns"] + 100 * 365 * 86400 * 10**9
    error = _refused(_jsonl(tmp_path / "raw.jsonl", records))
    assert error.field == "responses"


@pytest.mark.parametrize("where", ["response_timestamps", "timestamp"])
def test_genai_perf_stamps_past_int64_are_refused(tmp_path: Path, where: str) -> None:
    document = json.loads((DATA / "genai_perf_profile_export.json").read_text())
    request = document["experiments"][0]["requests"][0]
    if where == "timestamp":
        request["timestamp"] = 2**63 + 5
    else:
        request["response_timestamps"][-1] = 2**63 + 5
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(document))
    error = _refused(path)
    assert error.field == where


def test_every_imported_time_is_ordered_and_bounded() -> None:
    for name in (
        "vllm_bench_detailed.json",
        "aiperf_profile_export.jsonl",
        "aiperf_profile_export_raw.jsonl",
        "genai_perf_profile_export.json",
    ):
        for timeline in read_timelines(DATA / name).timelines:
            assert (np.diff(timeline.times) >= 0).all()
            assert len(timeline.times) == 0 or int(timeline.times[0]) >= 0


# -- credentials in the shapes error strings take ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Basic dXNlcjpodW50ZXIy", "dXNlcjpodW50ZXIy"),  # no sk- prefix to catch
        ("headers={'x-api-key': 'abcdef123456', 'Accept': '*/*'}", "abcdef123456"),  # repr
        ("{'Authorization': 'Token 9f8e7d6c5b4a'}", "9f8e7d6c5b4a"),
        ("Cannot connect to https://bench:hunter2@engine:8000/v1", "hunter2"),
        ("refused: access_token=eyJhbGciOiJIUzI1NiJ9.e30.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ('{"password": "correct horse battery"}', "horse"),
    ],
)
def test_credentials_in_peers_errors_are_hidden(text: str, secret: str) -> None:
    scrubbed = scrub_error(text)
    assert scrubbed is not None
    assert secret not in scrubbed
    assert "***" in scrubbed


def test_scrubbing_keeps_what_is_not_a_credential() -> None:
    text = "HTTP 429: max_tokens: 512 too many tokens: retry in 2s"
    assert scrub_error(text) == text


# -- what the peers really write --------------------------------------------------------------


def test_vllm_request_with_no_chunk_and_no_message_is_failed_as_vllm_counts_it(
    tmp_path: Path,
) -> None:
    # vLLM sets error = response.reason or "" on a non-200 answer: success is False, error "".
    path = _vllm(tmp_path, errors=["", "", "", ""])
    failed = read_timelines(path).timelines[3]
    assert len(failed) == 0
    assert failed.outcome == "error"
    assert failed.error is not None


def test_aiperf_failed_record_with_null_metrics_is_read(tmp_path: Path) -> None:
    # AIPerf's docs: "metrics ... will always be null for failed requests".
    records = _lines("aiperf_profile_export.jsonl")
    failed = copy.deepcopy(records[1])
    failed["metrics"] = None
    failed["error"] = {"code": 500, "type": "InternalServerError", "message": "boom"}
    run = read_timelines(_jsonl(tmp_path / "profile_export.jsonl", [records[0], failed]))
    assert len(run.timelines) == 2
    assert run.timelines[1].outcome == "error"
    assert len(run.timelines[1]) == 0


@pytest.mark.parametrize("metrics", [None, {}])
def test_aiperf_record_with_no_metrics_and_no_error_is_no_complete_stream(
    tmp_path: Path, metrics: Any
) -> None:
    # Nothing measured and nothing said: counted as a complete stream it would pass every
    # latency bound with no token at all.
    records = _lines("aiperf_profile_export.jsonl")
    unmeasured = copy.deepcopy(records[1])
    unmeasured["metrics"] = metrics
    unmeasured["error"] = None
    run = read_timelines(_jsonl(tmp_path / "profile_export.jsonl", [records[0], unmeasured]))
    assert run.timelines[0].outcome == "complete"
    assert run.timelines[1].outcome == "error"
    assert "no metrics" in (run.timelines[1].error or "")


def test_genai_perf_against_triton_generate_keeps_its_text_chunks(tmp_path: Path) -> None:
    # `genai-perf --endpoint-type generate`: each response is an SSE event of {"text_output"}.
    base = 1_795_870_000_000_000_000
    request = {
        "timestamp": base,
        "request_inputs": {"payload": "{}"},
        "response_timestamps": [base + 100_000_000, base + 120_000_000, base + 900_000_000],
        "response_outputs": [
            {"response": 'data: {"model_name":"m","text_output":"Hello"}\n\n'},
            {"response": 'data: {"model_name":"m","text_output":" there"}\n\n'},
            {"response": 'data: {"model_name":"m","text_output":"!"}\n\n'},
        ],
    }
    document = {"experiments": [{"experiment": {"mode": "concurrency", "value": 1},
                                 "requests": [request]}]}  # fmt: skip
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(document))
    (timeline,) = read_timelines(path).timelines
    assert int(timeline.text_mask.sum()) == 3
    times = timeline.times[timeline.text_mask]
    assert int(times[0]) == 100_000_000  # GenAI-Perf's TTFT: first response minus timestamp
    assert np.diff(times).tolist() == [20_000_000, 780_000_000]
