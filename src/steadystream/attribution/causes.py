"""What attribution may name, and what to do about each: the lab's causes plus ``unknown``.

The mitigations are the ones the seed articles give for each kind of pause (docs/attribution.md
cites them): the point of naming a cause is that the fixes differ.
"""

from __future__ import annotations

from typing import Final

from steadystream._causes import Cause

__all__ = ["ATTRIBUTABLE", "MITIGATIONS", "UNKNOWN", "Cause"]

UNKNOWN: Final = "unknown"
"""The attribution given when no evidence points anywhere (scored as wrong)."""

ATTRIBUTABLE: Final = (*(cause.value for cause in Cause), UNKNOWN)
"""Every label a stall may get, in the lab's order, ``unknown`` last."""

MITIGATIONS: Final[dict[str, str]] = {
    Cause.QUEUEING.value: (
        "requests wait for a place in the batch: keep enough capacity that they do not queue,"
        " admit by priority, and shorten prompts (prefix caching cuts the prefill they wait"
        " behind)"
    ),
    Cause.PREFILL_INTERFERENCE.value: (
        "another request's prefill stretches the decode step for everyone: smaller prefill"
        " chunks (chunked prefill), and admission control for long prompts"
    ),
    Cause.KV_PREEMPTION.value: (
        "the KV cache ran out and the stream was evicted and recomputed: a smaller batch, or"
        " paged-attention-aware admission control that admits only what the cache can hold"
    ),
    Cause.SPEC_DECODE_REJECTION.value: (
        "rejected speculative drafts cost whole steps: a draft model trained for this traffic,"
        " or a confidence-based fallback to plain decoding when acceptance drops"
    ),
    Cause.HEAD_BURST.value: (
        "the server holds the head of the answer and releases it at once: stream tokens as"
        " they are made, or pace the release on the client (a smoothing buffer)"
    ),
    Cause.NETWORK_BUFFERING.value: (
        "something between engine and reader holds the stream back: turn proxy buffering off"
        " for event streams (nginx proxy_buffering off, X-Accel-Buffering: no), disable"
        " Nagle-style coalescing, and smooth on the client with a small buffer"
    ),
    Cause.CONNECTION_HICCUP.value: (
        "the connection froze: a stall watchdog with mid-stream failover in the gateway, and a"
        " client that retries or resumes"
    ),
    Cause.INJECTED_FAULT.value: "a pause injected on purpose (X-Lab-Fault or scenario faults)",
    UNKNOWN: (
        "record more vantage points: the gateway's two edges place a pause on the path, and"
        " engine metrics (bench --engine-metrics) tell the engine's causes apart"
    ),
}
"""One line per label: what to change when this cause dominates."""
