"""One request inside the scheduler: what it will generate (decided at arrival) and its state.

Everything random about a request is drawn at arrival from its own generator, seeded from
``(seed, arrival ordinal)``: the answer length, the text, the speculative-decoding outcome of
every step, whether scenario faults apply, and (lazily, in order) its network delays. So the
same seed, scenario and arrival times give the same requests, whatever else runs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from steadystream.lab.causes import Extras
from steadystream.lab.emission import Emitter
from steadystream.lab.faults import FaultSpec
from steadystream.lab.scenario import SpecDecodeParams
from steadystream.lab.stream import Ending, StreamHandle
from steadystream.lab.truth import RequestTruth

__all__ = ["LabRequest", "Phase", "Sequence", "spec_decode_plan"]


@dataclass(frozen=True, slots=True)
class LabRequest:
    """What a client asked for, as the scheduler needs it."""

    request_id: str
    model: str = "lab"
    prompt_tokens: int = 32
    max_tokens: int | None = None
    ignore_eos: bool = False  # vLLM's extension: generate exactly max_tokens
    faults: FaultSpec | None = None  # None: the scenario's faults (header faults replace them)
    endpoint: str = "chat"  # the API it came through (lab/apis.py)
    stream: bool = True


class Phase(enum.IntEnum):
    ARRIVING = 0  # not yet eligible (slow first token)
    WAITING = 1  # in the queue
    PREFILL = 2  # admitted, computing its prompt (or recomputing after preemption)
    DECODE = 3
    PARKED = 4  # holding its KV, making nothing (a stall fault)
    DONE = 5


FOREVER = -1


@dataclass(slots=True, eq=False)
class Sequence:
    """Scheduler state of one request (or one background request, with no stream)."""

    key: int  # entry order: larger is newer (the preemption victim)
    arrival_ns: int
    ready_ns: int
    prompt_tokens: int
    target: int  # tokens to generate before it ends
    ending: Ending  # how it ends when ``target`` is reached
    stall_after: int | None = None
    stall_ns: int | None = None  # None: forever
    spec_tokens: list[int] | None = None
    spec_accepted: list[int] | None = None
    emitter: Emitter | None = None
    handle: StreamHandle | None = None
    truth: RequestTruth | None = None
    phase: Phase = Phase.ARRIVING
    generated: int = 0
    computed: int = 0  # prefill progress
    prefill_target: int = 0
    recompute: bool = False
    blocks: int = 0
    since_ns: int = 0  # entered the queue, or parked, at this boundary
    parked_until: int = 0
    stalled: bool = False
    spec_pos: int = 0
    step_tokens: int = 0  # made by the step in flight, delivered at its end
    step_prefill: int = 0
    cancel_noticed_ns: int | None = None
    extras: Extras = field(default_factory=dict)


def spec_decode_plan(
    rng: np.random.Generator, tokens: int, params: SpecDecodeParams
) -> tuple[list[int], list[int]]:
    """Tokens per decode step, and accepted drafts per step (-1: a step lost to rejection).

    Each step drafts ``k`` tokens; they are accepted in order while draws stay under the
    acceptance rate at that point of the answer; the step yields the accepted ones plus one.
    A draft whose first token is rejected costs ``rejection_penalty_steps`` empty steps.
    """
    k = params.draft_tokens
    start, end = params.acceptance_start, params.acceptance_end
    d0, d1 = params.drift_start, params.drift_end
    draws = rng.random((max(tokens, 1), k))
    per_step: list[int] = []
    accepted: list[int] = []
    position = 0
    row = 0
    while position < tokens:
        fraction = position / tokens
        if fraction <= d0:
            rate = start
        elif fraction >= d1 or d1 == d0:
            rate = end
        else:
            rate = start + (end - start) * (fraction - d0) / (d1 - d0)
        hits = draws[row] < rate
        row += 1
        taken = k if hits.all() else int(hits.argmin())
        per_step.append(taken + 1)
        accepted.append(taken)
        position += taken + 1
        if taken == 0:
            per_step.extend([0] * params.rejection_penalty_steps)
            accepted.extend([-1] * params.rejection_penalty_steps)
    return per_step, accepted
