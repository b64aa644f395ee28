"""The vocabulary of pause causes, shared by the lab (which knows them) and attribution (which
infers them): one enum, so that a label written by one is read by the other unchanged."""

from __future__ import annotations

import enum

__all__ = ["Cause"]


class Cause(enum.StrEnum):
    """The true cause of a pause, as the lab records it (docs/lab.md#causes)."""

    QUEUEING = "queueing"  # waited for admission (batch full, or no KV for the prompt)
    PREFILL_INTERFERENCE = "prefill-interference"  # a step stretched by another's prefill
    KV_PREEMPTION = "kv-preemption"  # evicted for KV space, waited, then recomputed
    SPEC_DECODE_REJECTION = "spec-decode-rejection"  # a rejected draft cost a step
    HEAD_BURST = "head-burst"  # held for the head burst, or paced in the slow tail
    NETWORK_BUFFERING = "network-buffering"  # delay, jitter or coalescing in transit
    CONNECTION_HICCUP = "connection-hiccup"  # the connection froze
    INJECTED_FAULT = "injected-fault"  # a stall, slow first token or silent finish, on purpose
