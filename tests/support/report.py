"""The report tests' inputs: the sample run in examples/, and small runs by hand."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from steadystream import Timeline
from tests.support.timelines import make_timeline

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUN = ROOT / "examples" / "sample-run.jsonl"


def steady(stream_id: str, gaps_ms: Sequence[float], *, ttft_ms: float = 100.0) -> Timeline:
    """A stream whose first token comes at ``ttft_ms``, then one token after each gap."""
    times = [ttft_ms]
    for gap in gaps_ms:
        times.append(times[-1] + gap)
    return make_timeline(times, stream_id=stream_id)
