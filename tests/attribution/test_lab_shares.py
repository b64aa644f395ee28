"""The lab's truth per gap, by cause in ns: a stretched step with a rejected draft is both."""

from __future__ import annotations

import pytest

from steadystream import EventKind
from steadystream.lab import PRESETS
from steadystream.lab.scenario import Scenario
from tests.support.lab import arrivals, run_lab

# Speculative decoding with unchunked long prompts arriving now and then (the blend
# blend-spec-prefill of benchmarks/bench_attribution.py).
BLEND = Scenario.model_validate(
    {
        "name": "spec-prefill",
        "spec_decode": PRESETS["spec-decode"].spec_decode.model_dump(),
        "scheduler": {"chunked_prefill": False, "prefill_per_token_ms": 0.1},
        "background": {
            "every_ms": 2000.0,
            "first_at_ms": 900.0,
            "prompt_tokens": 4000,
            "output_tokens": 8,
        },
    }
)


def delays(note: str | None) -> dict[str, int]:
    if note is None:
        return {}
    return {k: int(v) for k, v in (piece.split("=") for piece in note.split("+"))}


@pytest.mark.asyncio
async def test_a_rejected_draft_in_a_stretched_step_is_charged_to_both() -> None:
    run = await run_lab(BLEND, arrivals([0.0, 5.0, 10.0], max_tokens=300, ignore_eos=True))
    both = []
    for truth in run.truths:
        timeline = truth.to_timeline()
        notes = timeline.annotations["cause_ns"]
        mains = timeline.annotations["cause"]
        for kind, note, main, extra in zip(truth.kinds, notes, mains, truth.extra_ns, strict=True):
            if kind != int(EventKind.CONTENT):
                continue
            parsed = delays(note)
            assert parsed == {k: v for k, v in (extra or {}).items() if v > 0}
            if parsed:
                # largest first, the main cause the largest
                assert list(parsed.values()) == sorted(parsed.values(), reverse=True)
                assert main == next(iter(parsed))
            if {"prefill-interference", "spec-decode-rejection"} <= set(parsed):
                both.append(parsed)
    assert both
    # the prefill's 4000 tokens at 0.1 ms stretched the step by 400 ms; the rejection is
    # charged the rest of that step (and any step lost after it), not the whole of it
    for parsed in both:
        assert parsed["prefill-interference"] >= 400_000_000
        assert parsed["spec-decode-rejection"] < parsed["prefill-interference"]
