"""A stall split among its causes: the part every stream waited through, and its own part;
scored against the lab's per-cause delays by overlap of time."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from steadystream import Timeline, Where
from steadystream.attribution import (
    AttributedStall,
    EngineSamples,
    Explanation,
    explain,
    score,
)
from steadystream.attribution.engine import (
    PROMPT_TOKENS,
    SPEC_ACCEPTED,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
)
from steadystream.cli import _register, app
from steadystream.engine_metrics import SCHEMA, sidecar_path
from steadystream.files import write_jsonl
from tests.support.attribution import T0, cadence, stream

_register()
runner = CliRunner()

STRETCH_MS = 400.0  # one decode step another request's prefill stretched, for everyone
OWN_MS = 120.0  # stream a's rejected drafts on top of it


def fleet(*, own_ms: float = OWN_MS) -> list[Timeline]:
    """Eight streams at a 25 ms cadence; at 530 ms a step stretched by 400 ms for all; a
    resumes ``own_ms`` later than the others (its draft was rejected meanwhile)."""
    before = cadence(30, 21)  # the last at 530 ms
    after = cadence(530 + STRETCH_MS + 25, 20)
    streams = [stream([*before, *after], stream_id=f"o{i}", start_ms=0.3 * i) for i in range(1, 8)]
    late = [t + own_ms for t in after]
    return [stream([*before, *late], stream_id="a"), *streams]


def engine(*, prefill: float, drafts: float) -> EngineSamples:
    """Scrapes every 100 ms for 3 s: the prefill and the drafts counted during the stretch."""
    scrapes = []
    for k in range(31):
        t = k * 0.1
        during = t >= 0.6  # after the stretch began
        scrapes.append(
            (
                T0 + t,
                {
                    PROMPT_TOKENS: prefill if during else 0.0,
                    SPEC_DRAFTS: drafts * k,
                    SPEC_DRAFT_TOKENS: 4 * drafts * k,
                    SPEC_ACCEPTED: drafts * k,
                },
            )
        )
    return EngineSamples.from_scrapes(scrapes)


def stall_of(
    timelines: list[Timeline], samples: EngineSamples, stream_id: str = "a"
) -> tuple[Explanation, AttributedStall]:
    done = explain(timelines, engine=samples)
    (stall,) = [s for s in done.stalls if s.stream_id == stream_id]
    return done, stall


def test_a_stretched_step_and_rejected_drafts_split_by_time() -> None:
    done, stall = stall_of(fleet(), engine(prefill=4000.0, drafts=8.0))
    parts = {p.cause: p for p in stall.parts}
    assert set(parts) == {"prefill-interference", "spec-decode-rejection"}
    duration = STRETCH_MS + 25 + OWN_MS
    # the others resumed a step after the stretch: that much was everyone's
    assert parts["prefill-interference"].fraction == pytest.approx(
        (STRETCH_MS + 25) / duration, abs=0.02
    )
    assert parts["spec-decode-rejection"].fraction == pytest.approx(OWN_MS / duration, abs=0.02)
    assert stall.cause == "prefill-interference"  # the larger share
    assert parts["prefill-interference"].confidence == 0.9
    assert 0 < parts["spec-decode-rejection"].confidence < 0.9
    assert "split:" in stall.evidence
    # stall time by cause comes from the shares
    by_cause = {share.cause: share.time_s for share in done.by_cause}
    own_s = parts["spec-decode-rejection"].fraction * stall.duration_s
    assert by_cause["spec-decode-rejection"] == pytest.approx(own_s)
    assert done.stall_time_s == pytest.approx(sum(s.duration_s for s in done.stalls))
    shares = stall.to_json()["shares"]
    assert [s["cause"] for s in shares] == ["prefill-interference", "spec-decode-rejection"]
    assert sum(s["time_s"] for s in shares) == pytest.approx(stall.duration_s)


def test_a_one_cause_stall_stays_one_cause() -> None:
    # the others' stalls: the stretch alone, all of it shared
    _, stall = stall_of(fleet(), engine(prefill=4000.0, drafts=8.0), "o3")
    assert [(p.cause, p.fraction) for p in stall.parts] == [("prefill-interference", 1.0)]
    # a's own part too short to be split off: one cause
    _, short = stall_of(fleet(own_ms=20.0), engine(prefill=4000.0, drafts=8.0))
    assert len(short.parts) == 1
    assert short.shares == (short.parts[0],)


def test_no_split_without_evidence_for_each_part() -> None:
    # no prefill counted: nothing says the shared part was a stretched step
    _, stall = stall_of(fleet(), engine(prefill=0.0, drafts=8.0))
    assert len(stall.parts) == 1
    # no drafts: nothing names a's own part
    _, stall = stall_of(fleet(), engine(prefill=4000.0, drafts=0.0))
    assert [p.cause for p in stall.parts] == ["prefill-interference"]


def lab(stream_id: str, causes_ns: str | None, main: str | None) -> Timeline:
    """The lab's record of a stream: text event 41 ends the gap with ``causes_ns``."""
    main_list: list[str | None] = [None] * 41
    main_list[21] = main
    timeline = stream(cadence(20, 41), stream_id=stream_id, where=Where.LAB, cause=main_list)
    ns: list[str | None] = [None] * len(timeline)
    ns[22] = causes_ns  # the role event comes first
    timeline.annotations["cause_ns"] = ns
    return timeline


def test_scored_by_overlap_of_time() -> None:
    done, stall = stall_of(fleet(), engine(prefill=4000.0, drafts=8.0))
    assert stall.text_index == 21
    # the lab: 400 ms of stretch, 100 ms of rejection (the plain steps spread in proportion)
    truth = [lab("a", "prefill-interference=400000000+spec-decode-rejection=100000000", "x")]
    scored = score(done, truth)
    d = stall.duration_s
    said = {p.cause: p.fraction for p in stall.parts}
    right = min(0.8, said["prefill-interference"]) + min(0.2, said["spec-decode-rejection"])
    assert scored.right_s == pytest.approx(right * d)
    assert scored.share_right == pytest.approx(right)
    assert scored.total_s == pytest.approx(d)
    # one label per stall would have been 80 % right at best; the shares get closer
    assert right > 0.9
    # a gap the lab named no cause for is none, whatever small delays it carried
    scored = score(done, [lab("a", "queueing=1000", None)])
    assert scored.no_cause_s == pytest.approx(d)


def test_explain_prints_a_split_stalls_shares(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    write_jsonl(run, fleet())
    samples = engine(prefill=4000.0, drafts=8.0)
    lines = [
        orjson.dumps(
            {
                "schema": SCHEMA,
                "t": float(t),
                "values": {name: float(column[i]) for name, column in samples.series.items()},
            }
        )
        + b"\n"
        for i, t in enumerate(samples.times_s)
    ]
    sidecar_path(run).write_bytes(b"".join(lines))
    result = runner.invoke(app, ["explain", str(run)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "prefill-interference 78%" in result.output
    assert "spec-decode-rejection 22%" in result.output
    payload = orjson.loads(runner.invoke(app, ["explain", str(run), "--json"]).output)
    (split,) = [s for s in payload["stalls"] if len(s["shares"]) == 2]
    assert split["stream_id"] == "a"
    assert payload["by_cause"]["spec-decode-rejection"]["stalls"] == 1
