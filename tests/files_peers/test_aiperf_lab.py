"""The real AIPerf (pinned, in its own environment: `make peers`) against the lab, imported.

The lab freezes every stream for 1.5 s after its 20th token and records the truth. AIPerf
loads it and writes both exports; each imported stream's gaps must be AIPerf's own
inter-chunk latencies, to the nanosecond, and ``analyze`` of the export must put every
stream's worst gap where the lab injected its freeze.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from steadystream import read_timelines
from steadystream._processes import Child, free_port, steadystream_command
from steadystream.cli import _register, app
from steadystream.files import read_jsonl
from tests.support.peers import BYTE_TOKENIZER, aiperf, gaps_ns

_register()

STREAMS = 6
TOKENS = 40
FREEZE_AFTER = 20
FREEZE_S = 1.5
SCENARIO = f"""\
preset: steady
name: peers-freeze
description: steady, with a {FREEZE_S} s freeze after {FREEZE_AFTER} tokens in each stream
output:
  min_tokens: {TOKENS}
  max_tokens: {TOKENS}
faults:
  share: 1.0
  stall_after: {FREEZE_AFTER}
  stall_ms: {FREEZE_S * 1000:g}
"""


@pytest.fixture(scope="module")
def aiperf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """AIPerf's artifact folder (records and raw exports) and the lab's truth beside it."""
    tool = aiperf()
    work = tmp_path_factory.mktemp("aiperf")
    tokenizer = work / "byte-tokenizer"
    subprocess.run(
        [str(tool.with_name("python")), "-c", BYTE_TOKENIZER, str(tokenizer)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    scenario = work / "freeze.yaml"
    scenario.write_text(SCENARIO)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    lab = steadystream_command(
        "lab",
        "--scenario",
        str(scenario),
        "--port",
        str(port),
        "--record",
        str(work / "truth.jsonl"),
    )
    command = [
        str(tool), "profile", "--model", "lab", "--url", url, "--endpoint-type", "chat",
        "--streaming", "--concurrency", "3", "--request-count", str(STREAMS),
        "--synthetic-input-tokens-mean", "32", "--output-tokens-mean", str(TOKENS),
        "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
        "--tokenizer", str(tokenizer), "--artifact-dir", str(work / "artifacts"),
        "--ui-type", "none", "--export-level", "raw",
    ]  # fmt: skip
    lab_log, aiperf_log = work / "lab.log", work / "aiperf.log"
    with (
        Child("the lab", lab, health_url=f"{url}/healthz", log=lab_log),
        aiperf_log.open("wb") as log,
    ):
        # AIPerf writes its dataset's memory maps under the temp folder and leaves them: this
        # run's go in its own folder, not the machine's.
        scratch = work / "tmp"
        scratch.mkdir()
        env = {**os.environ, "TMPDIR": str(scratch)}
        subprocess.run(command, check=True, timeout=300, stdout=log, stderr=log, env=env)
    return work


@pytest.mark.integration
@pytest.mark.slow
def test_each_stream_has_aiperfs_own_gaps(aiperf_run: Path) -> None:
    export = aiperf_run / "artifacts" / "profile_export.jsonl"
    run = {t.stream_id: t for t in read_timelines(export).timelines}
    raw = {
        t.stream_id: t
        for t in read_timelines(export.with_name("profile_export_raw.jsonl")).timelines
    }
    records = [json.loads(line) for line in export.read_text().splitlines()]
    assert len(records) == len(run) == len(raw) == STREAMS
    for record in records:
        stream = run[record["metadata"]["x_request_id"]]
        icl_ms = np.array(record["metrics"]["inter_chunk_latency"]["value"])
        assert gaps_ns(stream).tolist() == np.rint(icl_ms * 1e6).astype(np.int64).tolist()
        assert gaps_ns(raw[stream.stream_id]).tolist() == gaps_ns(stream).tolist()
        ttft_ms = record["metrics"]["time_to_first_token"]["value"]
        assert int(stream.times[stream.text_mask][0]) == round(ttft_ms * 1e6)
        assert stream.total_tokens == TOKENS


@pytest.mark.integration
@pytest.mark.slow
def test_analyze_of_the_export_names_the_labs_freeze(aiperf_run: Path) -> None:
    export = aiperf_run / "artifacts" / "profile_export.jsonl"
    result = CliRunner().invoke(app, ["analyze", str(export), "--json", "--worst", str(STREAMS)])
    assert result.exit_code == 0, result.output
    worst = orjson.loads(result.output)["worst_streams"]
    truth = {t.stream_id: t for t in read_jsonl(aiperf_run / "truth.jsonl").timelines}
    assert len(worst) == STREAMS
    for row in worst:
        lab = truth[row["stream_id"]]
        causes = [
            c for c, text in zip(lab.annotations["cause"], lab.text_mask, strict=True) if text
        ]
        injected = [i for i, cause in enumerate(causes) if cause and "injected-fault" in cause]
        assert injected == [FREEZE_AFTER]  # the lab's freeze ends at its 21st token
        assert row["longest_stall_token"] == FREEZE_AFTER  # and AIPerf's run shows it there
        assert FREEZE_S <= row["max_gap_s"] < FREEZE_S + 0.5
        assert row["stall_count"] == 1
