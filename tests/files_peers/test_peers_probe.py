"""What an adversarial probe of the peers' importers found: a token total no stream holds, a
tool call's function as a string, a cut indented document, a time with no time unit, gaps with
no first chunk, a cut gzip export, CR and CRLF framed SSE, and keys the scrubber missed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steadystream import TimelineFormatError, read_timelines, write_timelines
from steadystream._types import EventKind
from steadystream.cli import _register, app
from steadystream.files.peers._requests import MAX_TOKENS_PER_CHUNK, scrub_error
from tests.support.peers import DATA

_register()
runner = CliRunner()
_HUGE = 2**31 - 1


def refused(path: Path, fmt: str | None = None) -> TimelineFormatError:
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(path, format=fmt)
    return caught.value


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


def aiperf_record(**metrics: Any) -> dict[str, Any]:
    return {"metadata": {"x_request_id": "a"}, "metrics": metrics}


def raw_record(*events: str) -> dict[str, Any]:
    responses = [
        {"perf_ns": 2000 + i, "packets": [{"name": "data", "value": e}]}
        for i, e in enumerate(events)
    ]
    return {"metadata": {"x_request_id": "a"}, "start_perf_ns": 1000, "responses": responses}


def genai_document(*responses: str) -> dict[str, Any]:
    request = {
        "timestamp": 1000,
        "response_timestamps": [2000 + i for i in range(len(responses))],
        "response_outputs": [{"response": r} for r in responses],
    }
    return {
        "experiments": [{"experiment": {"mode": "concurrency", "value": 1}, "requests": [request]}]
    }


def content(text: str) -> str:
    return json.dumps({"choices": [{"delta": {"content": text}}]})


def usage(completion_tokens: int) -> str:
    return json.dumps({"choices": [], "usage": {"completion_tokens": completion_tokens}})


# -- a token total no stream holds ------------------------------------------------------------


def test_vllm_token_total_past_its_chunks_is_refused(tmp_path: Path) -> None:
    # 85 bytes that asked analyze for 16 GiB: 2**31-1 tokens over three chunks
    path = write_json(
        tmp_path / "vllm.json",
        {"ttfts": [0.1], "itls": [[0.02, 0.02]], "output_lens": [_HUGE], "errors": [""]},
    )
    error = refused(path)
    assert error.field == "output_lens"
    assert "request 0: output_lens is 2,147,483,647 tokens over 3 chunks" in str(error)


def test_aiperf_token_total_past_its_chunks_is_refused(tmp_path: Path) -> None:
    record = aiperf_record(
        time_to_first_token={"value": 90, "unit": "ms"},
        inter_chunk_latency={"value": [20, 30], "unit": "ms"},
        output_token_count={"value": _HUGE, "unit": "tokens"},
    )
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(record) + "\n")
    error = refused(path, "aiperf")
    assert (error.line, error.field) == (1, "metrics.output_token_count")


def test_aiperf_raw_usage_past_its_chunks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "raw.jsonl"
    path.write_text(json.dumps(raw_record(content("a"), usage(_HUGE))) + "\n")
    error = refused(path, "aiperf-raw")
    assert error.field == "responses[1].usage.completion_tokens"


def test_genai_perf_usage_past_its_chunks_is_refused(tmp_path: Path) -> None:
    sse = f"data: {content('a')}\n\ndata: {usage(_HUGE)}\n\n"
    path = write_json(tmp_path / "profile_export.json", genai_document(sse))
    error = refused(path, "genai-perf")
    assert error.field == "response_outputs[0].usage.completion_tokens"
    assert "experiments[0].requests[0]" in str(error)


def test_a_whole_answer_buffered_into_one_chunk_is_read(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "vllm.json",
        {"ttfts": [0.1], "itls": [[]], "output_lens": [MAX_TOKENS_PER_CHUNK], "errors": [""]},
    )
    (timeline,) = read_timelines(path).timelines
    assert timeline.tokens.tolist() == [MAX_TOKENS_PER_CHUNK]


# -- a tool call's function as a string -------------------------------------------------------

_TOOL_CALL = json.dumps({"choices": [{"delta": {"tool_calls": [{"function": "x"}]}}]})


def test_aiperf_raw_tool_call_with_a_function_string_is_a_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "raw.jsonl"
    path.write_text(json.dumps(raw_record(_TOOL_CALL)) + "\n")
    (timeline,) = read_timelines(path, format="aiperf-raw").timelines
    assert timeline.kinds.tolist() == [int(EventKind.TOOL_CALL)]


def test_genai_perf_tool_call_with_a_function_string_is_a_tool_call(tmp_path: Path) -> None:
    path = write_json(tmp_path / "g.json", genai_document(f"data: {_TOOL_CALL}\n\n"))
    (timeline,) = read_timelines(path, format="genai-perf").timelines
    assert timeline.kinds.tolist() == [int(EventKind.TOOL_CALL)]


# -- a cut indented document ------------------------------------------------------------------


def test_a_cut_indented_document_is_reported_where_it_breaks(tmp_path: Path) -> None:
    text = (DATA / "genai_perf_profile_export.json").read_text()
    path = tmp_path / "profile_export.json"
    path.write_text(text[:3000])
    error = refused(path)
    assert "not valid JSON" in str(error)
    assert error.line == text[:3000].count("\n") + 1  # the last line, where the data ends


def test_a_bad_byte_mid_document_names_its_line(tmp_path: Path) -> None:
    lines = (DATA / "genai_perf_profile_export.json").read_text().split("\n")
    lines[9] = lines[9].replace(":", "", 1)
    path = tmp_path / "profile_export.json"
    path.write_text("\n".join(lines))
    assert refused(path, "genai-perf").line == 10


def test_appended_runs_still_name_their_bad_line(tmp_path: Path) -> None:
    run = json.dumps({"ttfts": [0.1], "itls": [[0.02]], "output_lens": [2], "errors": [""]})
    path = tmp_path / "vllm.json"
    path.write_text(f"{run}\n{run[:40]}\n")
    error = refused(path, "vllm")
    assert error.line == 2


# -- AIPerf: units and the first chunk --------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "named"),
    [
        (
            {
                "time_to_first_token": {"value": 900},
                "inter_chunk_latency": {"value": [20, 30], "unit": "ms"},
            },
            "metrics.time_to_first_token.unit",
        ),
        (
            {
                "time_to_first_token": {"value": 900, "unit": "ms"},
                "inter_chunk_latency": {"value": [20, 30], "unit": "tokens"},
            },
            "metrics.inter_chunk_latency.unit",
        ),
        (
            {
                "time_to_first_token": {"value": 900, "unit": "ms"},
                "request_latency": {"value": 990, "unit": "count"},
            },
            "metrics.request_latency.unit",
        ),
    ],
)
def test_aiperf_time_without_a_time_unit_is_refused(
    tmp_path: Path, metrics: dict[str, Any], named: str
) -> None:
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(aiperf_record(**metrics)) + "\n")
    error = refused(path, "aiperf")
    assert f"{named} must be one of ns, us, ms, s, sec" in str(error)
    assert error.line == 1


def test_aiperf_gaps_without_a_first_chunk_are_refused(tmp_path: Path) -> None:
    # a 3 s stall in the gaps, no time_to_first_token: it became a stream with no chunk
    record = aiperf_record(
        inter_chunk_latency={"value": [20, 3000, 20], "unit": "ms"},
        output_token_count={"value": 4, "unit": "tokens"},
        request_latency={"value": 3200, "unit": "ms"},
    )
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(record) + "\n")
    error = refused(path, "aiperf")
    assert (error.line, error.field) == (1, "metrics.time_to_first_token")


# -- a cut gzip export ------------------------------------------------------------------------


def test_a_cut_gzip_aiperf_export_keeps_every_record_before_the_cut(tmp_path: Path) -> None:
    data = (DATA / "aiperf_profile_export.jsonl").read_bytes()
    assert data.count(b"\n") == 2
    path = tmp_path / "profile_export.jsonl.gz"
    path.write_bytes(gzip.compress(data)[:-30])  # the end of line 2 and the trailer lost
    result = read_timelines(path, format="aiperf")
    assert len(result.timelines) == 1
    assert result.truncated_line == 2


def test_a_whole_gzip_export_of_several_members_is_read(tmp_path: Path) -> None:
    data = (DATA / "aiperf_profile_export.jsonl").read_bytes()
    first, second = data.split(b"\n", 1)
    path = tmp_path / "profile_export.jsonl.gz"
    path.write_bytes(gzip.compress(first + b"\n") + gzip.compress(second))
    result = read_timelines(path, format="aiperf")
    assert len(result.timelines) == 2
    assert result.truncated_line is None


def test_a_cut_gzip_document_is_reported_where_it_breaks(tmp_path: Path) -> None:
    data = (DATA / "genai_perf_profile_export.json").read_bytes()
    path = tmp_path / "profile_export.json.gz"
    path.write_bytes(gzip.compress(data)[:-200])
    error = refused(path, "genai-perf")
    assert "not valid JSON" in str(error)
    assert error.line is not None
    assert error.line > 1


# -- SSE framed with CR or CRLF ---------------------------------------------------------------


@pytest.mark.parametrize("end", ["\r\n", "\r", "\n"])
def test_genai_perf_events_framed_with_any_line_end_are_read(tmp_path: Path, end: str) -> None:
    sse = f"data: {content('a')}{end}{end}data: {content('b')}{end}{end}"
    path = write_json(tmp_path / "g.json", genai_document(sse))
    (timeline,) = read_timelines(path, format="genai-perf").timelines
    assert timeline.kinds.tolist() == [int(EventKind.CONTENT)]
    assert timeline.text_bytes.tolist() == [2]  # "ab": both events of the one response


# -- keys in peers' errors ---------------------------------------------------------------------

_LEAKS = [
    "400, message='Bad Request', url='https://generativelanguage.googleapis.com/v1beta/models/"
    "g:streamGenerateContent?alt=sse&key=AIzaSyLEAK1234567890'",
    "Ocp-Apim-Subscription-Key: LEAKazure0123456789",
    "OPENAI_API_KEY=LEAKplainkey0123",
    "HF_TOKEN=hf_LEAKhuggingface0123",
    "{'api_key': b'LEAKbytes0123'}",
    "gsk_LEAKgroqkey0123456789",
    "AIzaSyLEAK1234567890abcdefghijklmnopq rejected",
    "hf_LEAKhuggingface0123 has no access",
]


def test_keys_in_peers_errors_are_kept_out_of_every_timeline(tmp_path: Path) -> None:
    n = len(_LEAKS)
    path = write_json(
        tmp_path / "vllm.json", {"ttfts": [0.0] * n, "itls": [[]] * n, "errors": _LEAKS}
    )
    timelines = read_timelines(path).timelines
    for timeline in timelines:
        assert timeline.error is not None
        assert "LEAK" not in timeline.error
        assert "***" in timeline.error
    out = tmp_path / "kept.jsonl"
    write_timelines(out, timelines)
    assert b"LEAK" not in out.read_bytes()


def test_keys_stay_out_of_what_whatif_writes(tmp_path: Path) -> None:
    n = len(_LEAKS)
    path = write_json(
        tmp_path / "vllm.json",
        {"ttfts": [0.1] * n, "itls": [[0.02]] * n, "output_lens": [2] * n, "errors": _LEAKS},
    )
    out = tmp_path / "paced.jsonl"
    result = runner.invoke(app, ["whatif", str(path), "--pacer", "leaky", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert b"***" in out.read_bytes()
    assert b"LEAK" not in out.read_bytes()
    assert "LEAK" not in result.output


@pytest.mark.parametrize(
    "text",
    [
        "HTTP 429: max_tokens: 512 too many tokens: retry in 2s",
        "the key=value pair, monkey=3, ?key_id=4",
        "task-forces and Sk-learn: prompt_tokens=12 completion_tokens=40",
        "https://engine:8000/v1/chat/completions?alt=sse",
    ],
)
def test_scrubbing_leaves_ordinary_text_alone(text: str) -> None:
    assert scrub_error(text) == text
