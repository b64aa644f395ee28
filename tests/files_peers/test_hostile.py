"""Bad, huge and hostile peers' files: one clear error naming the record and the field, a cut
last line reported (every record before it kept), every read bounded, no key kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steadystream import TimelineFormatError, read_timelines, write_timelines
from steadystream.files.peers import _requests, _source, read_peer
from tests.support.peers import DATA


def vllm_file(tmp_path: Path, **changes: Any) -> Path:
    document = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    document.update(changes)
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(document))
    return path


def aiperf_lines() -> list[dict[str, Any]]:
    text = (DATA / "aiperf_profile_export.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def write_lines(path: Path, records: list[Any], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def refused(path: Path, fmt: str | None = None) -> TimelineFormatError:
    with pytest.raises(TimelineFormatError) as caught:
        read_timelines(path, format=fmt)
    return caught.value


# -- vLLM -------------------------------------------------------------------------------------


def test_vllm_without_save_detailed_says_how_to_save_it(tmp_path: Path) -> None:
    document = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    for key in ("ttfts", "itls", "input_lens", "output_lens", "generated_texts", "errors"):
        del document[key]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(document))
    error = refused(path)  # still found as vLLM's: backend and num_prompts
    assert "--save-detailed" in str(error)
    assert error.field == "ttfts"


@pytest.mark.parametrize(
    ("change", "message", "field"),
    [
        (
            {"itls": [[0.02], [0.02, "x"], [0.03], []]},
            "request 1: itls[1] must be a number",
            "itls",
        ),
        ({"itls": [[0.02], [0.02, -1], [0.03], []]}, "request 1: itls[1] must be a finite", "itls"),
        (
            {"itls": [[0.02], [0.02, True], [0.03], []]},
            "request 1: itls[1] must be a number",
            "itls",
        ),
        ({"itls": [[0.02], {"a": 1}, [0.03], []]}, "request 1: itls must be a list", "itls"),
        (
            {"ttfts": [0.1, None, 0.1, 0.0]},
            "request 1: ttfts must be a number of seconds, not missing",
            "ttfts",
        ),
        ({"output_lens": [6, 6, 6]}, "output_lens has 3 entries, ttfts has 4", "output_lens"),
        (
            {"output_lens": [6, -6, 6, 0]},
            "request 1: output_lens must be an integer",
            "output_lens",
        ),
        ({"errors": ["", 7, "", ""]}, "request 1: errors must hold strings", "errors"),
    ],
)
def test_vllm_bad_values_name_the_request_and_field(
    tmp_path: Path, change: dict[str, Any], message: str, field: str
) -> None:
    error = refused(vllm_file(tmp_path, **change))
    assert message in str(error)
    assert error.field == field
    assert error.path == str(tmp_path / "vllm.json")


def test_vllm_appended_runs_are_one_document_a_line(tmp_path: Path) -> None:
    one = (DATA / "vllm_bench_detailed.json").read_text()
    path = tmp_path / "appended.json"
    path.write_text(one + "\n" + one)  # --append-result
    run = read_timelines(path).timelines
    assert len(run) == 8
    assert run[4].stream_id == "vllm-1-0"
    assert run[4].meta["peer"]["run"] == 1


def test_a_document_over_the_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_source, "MAX_DOCUMENT_BYTES", 100)
    assert "a JSON document is read whole" in str(refused(DATA / "vllm_bench_detailed.json"))


def test_a_chunk_list_over_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_requests, "MAX_CHUNKS", 4)
    error = refused(DATA / "vllm_bench_detailed.json")
    assert "request 0: itls has 5 entries; at most 4 are read" in str(error)


# -- AIPerf -----------------------------------------------------------------------------------


def test_aiperf_cut_last_line_keeps_every_record_before_it(tmp_path: Path) -> None:
    records = aiperf_lines()
    path = write_lines(tmp_path / "profile_export.jsonl", records, json.dumps(records[0])[:300])
    result = read_timelines(path)
    assert len(result.timelines) == 2
    assert result.truncated_line == 3


def test_aiperf_bad_line_mid_file_is_an_error_naming_it(tmp_path: Path) -> None:
    records = aiperf_lines()
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(records[0]) + "\n{not json\n" + json.dumps(records[1]) + "\n")
    error = refused(path)
    assert error.line == 2
    assert "not valid JSON" in str(error)


@pytest.mark.parametrize(
    ("mutate", "message", "field"),
    [
        (
            lambda r: r["metrics"]["inter_chunk_latency"]["value"].__setitem__(3, "slow"),
            "metrics.inter_chunk_latency[3] must be a number",
            "metrics.inter_chunk_latency",
        ),
        (
            lambda r: r["metrics"]["inter_chunk_latency"].__setitem__("unit", "fortnights"),
            "unit must be one of ns, us, ms, s, sec, not 'fortnights'",
            "metrics.inter_chunk_latency",
        ),
        (
            lambda r: r["metrics"].__setitem__("time_to_first_token", 12),
            "must be an object with a value and a unit",
            "metrics.time_to_first_token",
        ),
        (lambda r: r.__setitem__("metadata", []), "metadata must be an object", "metadata"),
        (
            lambda r: r["metrics"]["output_token_count"].__setitem__("value", 2.5),
            "metrics.output_token_count must be an integer",
            "metrics.output_token_count",
        ),
    ],
)
def test_aiperf_bad_values_name_the_line_and_field(
    tmp_path: Path, mutate: Any, message: str, field: str
) -> None:
    records = aiperf_lines()
    mutate(records[1])
    error = refused(write_lines(tmp_path / "profile_export.jsonl", records), "aiperf")
    assert message in str(error)
    assert error.line == 2
    assert error.field == field


def test_aiperf_line_over_the_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_source, "MAX_LINE_BYTES", 1000)
    error = refused(DATA / "aiperf_profile_export.jsonl")
    assert error.line == 1
    assert "a line over" in str(error)


def test_aiperf_error_and_cancel_are_outcomes(tmp_path: Path) -> None:
    records = aiperf_lines()
    records[0]["error"] = {
        "code": 500,
        "type": "HTTPError",
        "message": "api_key=sk-live-abcdefghijk",
    }
    records[1]["metadata"]["was_cancelled"] = True
    run = read_timelines(write_lines(tmp_path / "profile_export.jsonl", records)).timelines
    assert run[0].outcome == "error"
    assert run[0].error == "HTTPError 500: api_key=***"
    assert run[1].outcome == "cancelled"


def test_aiperf_raw_time_going_back_is_refused(tmp_path: Path) -> None:
    record = json.loads((DATA / "aiperf_profile_export_raw.jsonl").read_text().splitlines()[0])
    record["responses"][5]["perf_ns"] = record["start_perf_ns"] + 1
    error = refused(write_lines(tmp_path / "raw.jsonl", [record]))
    assert "chunk 5 came before the one ahead of it" in str(error)
    assert error.field == "responses"


def test_aiperf_raw_keeps_no_header_and_no_prompt(tmp_path: Path) -> None:
    record = json.loads((DATA / "aiperf_profile_export_raw.jsonl").read_text().splitlines()[0])
    record["request_headers"]["Authorization"] = "Bearer sk-secret-header-key"
    record["payload"]["messages"][0]["content"] = "a private prompt"
    run = read_timelines(write_lines(tmp_path / "raw.jsonl", [record])).timelines
    out = tmp_path / "run.jsonl"
    write_timelines(out, run, keep_text=True)
    written = out.read_text()
    assert "sk-secret" not in written
    assert "private prompt" not in written
    assert run[0].labels == {"model": "lab"}


# -- GenAI-Perf -------------------------------------------------------------------------------


def test_genai_perf_mismatched_outputs_name_the_request(tmp_path: Path) -> None:
    document = json.loads((DATA / "genai_perf_profile_export.json").read_text())
    document["experiments"][0]["requests"][1]["response_outputs"].pop()
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(document))
    error = refused(path)
    assert str(error).startswith(f"{path}: experiments[0].requests[1]: response_outputs")
    assert error.field == "response_outputs"


def test_genai_perf_non_json_event_is_refused(tmp_path: Path) -> None:
    document = json.loads((DATA / "genai_perf_profile_export.json").read_text())
    document["experiments"][0]["requests"][0]["response_outputs"][2] = {"response": "data: {x"}
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(document))
    assert "response_outputs[2]: the data of an SSE event is not JSON" in str(refused(path))


def test_a_peer_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text('{"backend": "openai", "num_prompts": 3, "itls": [[0.1]')
    assert "not valid JSON" in str(refused(path))
    with pytest.raises(TimelineFormatError, match="not valid JSON"):
        read_peer(path, "genai-perf")
