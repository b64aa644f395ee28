"""The built-in scenarios: each makes one kind of pause plainly visible (docs/lab.md).

Each preset is the defaults plus a few changes; the values are calibrated so that the pause
it promises stands out of a ~25 ms decode cadence by an order of magnitude or more, and the
lab tests check that it does and that it is labelled with the right cause.
"""

from __future__ import annotations

from typing import Any

from steadystream.lab.scenario import Scenario

__all__ = ["PRESETS", "preset_lines"]

_PRESET_CHANGES: dict[str, dict[str, Any]] = {
    "steady": {
        "description": "a clean 25 ms decode cadence and nothing else: the control",
    },
    "prefill-interference": {
        "description": (
            "unchunked 4,000-token prompts arrive every 1.5 s and stretch a step by ~400 ms"
        ),
        "scheduler": {"chunked_prefill": False, "prefill_per_token_ms": 0.1},
        "background": {
            "every_ms": 1500.0,
            "first_at_ms": 700.0,
            "prompt_tokens": 4000,
            "output_tokens": 8,
        },
    },
    "kv-pressure": {
        "description": (
            "a small KV cache shared with a stream of background requests: the newest "
            "stream is preempted, waits at the head of the queue and recomputes"
        ),
        "scheduler": {"prefill_per_token_ms": 0.05},
        "kv_cache": {"block_tokens": 16, "total_blocks": 256},
        "output": {"min_tokens": 300, "max_tokens": 500},
        "background": {
            "every_ms": 600.0,
            "first_at_ms": 0.0,
            "max_alive": 6,
            "prompt_tokens": 600,
            "output_tokens": 200,
        },
    },
    "spec-decode": {
        "description": (
            "speculative decoding whose acceptance drifts from 85% to 25% mid-answer; "
            "rejected drafts cost two steps"
        ),
        "spec_decode": {
            "enabled": True,
            "draft_tokens": 4,
            "draft_cost_ms": 1.5,
            "acceptance_start": 0.85,
            "acceptance_end": 0.25,
            "drift_start": 0.35,
            "drift_end": 0.55,
            "rejection_penalty_steps": 2,
        },
    },
    "single-token-chunks": {
        "description": "an 8 ms cadence with one token per SSE event: many tiny chunks",
        "scheduler": {"step_base_ms": 8.0},
        "output": {"min_tokens": 300, "max_tokens": 500},
    },
    "head-burst": {
        "description": "the first 40 tokens released at once, then a slow 60 ms-per-token tail",
        "scheduler": {"step_base_ms": 10.0},
        "emission": {"head_burst_tokens": 40, "tail_interval_ms": 60.0},
    },
    "flaky-network": {
        "description": (
            "30 ms away with jitter, Nagle-like 40 ms coalescing, and 0.5-2 s connection hiccups"
        ),
        "network": {
            "base_delay_ms": 30.0,
            "jitter_ms": 10.0,
            "coalesce_ms": 40.0,
            "hiccup_probability": 0.01,
            "hiccup_min_ms": 500.0,
            "hiccup_max_ms": 2000.0,
        },
    },
    "mixed": {
        "description": (
            "a realistic blend: chunked long prompts, some KV pressure, a little network "
            "jitter and rare hiccups (the demo's default)"
        ),
        "scheduler": {"prefill_chunk_tokens": 2048, "prefill_per_token_ms": 0.05},
        "kv_cache": {"total_blocks": 600},
        "output": {"min_tokens": 120, "max_tokens": 400},
        "background": {
            "every_ms": 2500.0,
            "first_at_ms": 1000.0,
            "max_alive": 3,
            "prompt_tokens": 3000,
            "output_tokens": 400,
        },
        "network": {
            "base_delay_ms": 5.0,
            "jitter_ms": 4.0,
            "hiccup_probability": 0.002,
            "hiccup_min_ms": 500.0,
            "hiccup_max_ms": 1500.0,
        },
    },
}

PRESETS: dict[str, Scenario] = {
    name: Scenario.model_validate({"name": name, **changes})
    for name, changes in _PRESET_CHANGES.items()
}
"""Built-in scenarios by name."""


def preset_lines() -> list[str]:
    """One line per preset, as ``steadystream lab --list`` prints them."""
    width = max(len(name) for name in PRESETS)
    return [f"{name:<{width}}  {scenario.description}" for name, scenario in PRESETS.items()]
