"""What the gateway soak sends: the mix of client behaviours and upstream faults, and what each
stream must end as. Pure: a seed and a few numbers in, a list of planned streams out.

Every fault is asked of the lab by ``X-Lab-Fault`` (docs/lab.md). The gateway forwards that
header to the first upstream only, so a failover lands on a healthy lab and its outcome is
known in advance.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["KINDS", "Kind", "SoakShape", "StreamPlan", "plan_streams"]

Reader = Literal["healthy", "slow", "stuck", "disconnect"]


@dataclass(frozen=True)
class SoakShape:
    """The numbers a soak run is built from (the CLI's options)."""

    streams: int = 1000
    seconds: float = 600.0
    seed: int = 1
    oversize_bytes: int = 8_000_000  # above any sane limits.max_event_bytes, far from chunks
    silence_s: float = 30.0  # a finish, then this long without [DONE] or a close
    long_tokens: int = 1500  # slow and stuck readers ask for this many (ignore_eos)
    stall_s: float = 4.0  # long enough for the watchdog (stall_timeout 1.5 s) to fail over
    short_stall_s: float = 0.6  # a pause the watchdog must sit through


@dataclass(frozen=True)
class Kind:
    """One behaviour of the mix: how the client reads, what the lab does, what must result."""

    name: str
    weight: float
    reader: Reader
    expected: frozenset[str]  # accepted gateway outcomes
    fault: Callable[[random.Random, SoakShape], str] | None = None
    long: bool = False


def _after(rng: random.Random) -> int:
    return rng.randint(3, 30)  # natural answers have at least 40 tokens


KINDS: tuple[Kind, ...] = (
    Kind("healthy", 0.28, "healthy", frozenset({"complete"})),
    Kind("slow-reader", 0.07, "slow", frozenset({"complete"}), long=True),
    Kind("stuck-reader", 0.05, "stuck", frozenset({"client-stuck"}), long=True),
    Kind("disconnect", 0.12, "disconnect", frozenset({"cancelled"})),
    Kind(
        "short-stall",
        0.05,
        "healthy",
        frozenset({"complete"}),
        lambda r, s: f"stall-after={_after(r)}:{s.short_stall_s * 1000:g}ms",
    ),
    Kind(
        "stall",
        0.08,
        "healthy",
        frozenset({"failed-over"}),
        lambda r, s: f"stall-after={_after(r)}:{s.stall_s * 1000:g}ms",
    ),
    Kind(
        "reset",
        0.08,
        "healthy",
        frozenset({"failed-over"}),
        lambda r, s: f"reset-after={_after(r)}",
    ),
    Kind(
        "in-band-error",
        0.08,
        "healthy",
        frozenset({"failed-over"}),
        lambda r, s: f"error-after={_after(r)}",
    ),
    Kind(
        "oversized-event",
        0.05,
        "healthy",
        # Past limits.max_event_bytes: this stream fails in-band, or fails over.
        frozenset({"failed-over", "error"}),
        lambda r, s: f"oversize-after={_after(r)}:{s.oversize_bytes}",
    ),
    Kind(
        "finish-then-silence",
        0.06,
        "healthy",
        frozenset({"complete"}),
        lambda r, s: f"silent-finish={s.silence_s * 1000:g}ms",
    ),
    Kind(
        "echo-key-error",
        0.04,
        "healthy",
        frozenset({"failed-over"}),
        lambda r, s: f"echo-auth={_after(r)}:error",
    ),
    Kind(
        "echo-key-malformed",
        0.04,
        "healthy",
        frozenset({"failed-over"}),
        lambda r, s: f"echo-auth={_after(r)}:malformed",
    ),
)


@dataclass(frozen=True)
class StreamPlan:
    """One stream of the soak."""

    index: int
    request_id: str
    kind: Kind
    start_s: float  # from the start of the load
    route: Literal["chat", "completions"]
    fault: str | None
    body: dict[str, Any] = field(repr=False)
    disconnect_after: int | None = None  # content events read before leaving; -1: at once
    abort: bool = False  # leave with a reset (SO_LINGER 0) rather than a clean close

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.route == "chat" else "/v1/completions"


def _counts(streams: int) -> list[int]:
    """Streams per kind in proportion to the weights, largest remainders first, each >= 1."""
    total = sum(kind.weight for kind in KINDS)
    exact = [streams * kind.weight / total for kind in KINDS]
    counts = [max(1, int(x)) for x in exact]
    order = sorted(range(len(KINDS)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    i = 0
    while sum(counts) < streams:
        counts[order[i % len(order)]] += 1
        i += 1
    while sum(counts) > streams:
        largest = max(range(len(counts)), key=counts.__getitem__)
        counts[largest] -= 1
    return counts


def plan_streams(shape: SoakShape) -> list[StreamPlan]:
    """The soak's streams, shuffled, with start times spread over the first 85% of the run."""
    if shape.streams < len(KINDS):
        raise ValueError(f"--streams must be at least {len(KINDS)} (one of each kind)")
    rng = random.Random(shape.seed)
    kinds = [kind for kind, n in zip(KINDS, _counts(shape.streams), strict=True) for _ in range(n)]
    rng.shuffle(kinds)
    window = shape.seconds * 0.85
    spacing = window / shape.streams
    plans = []
    for index, kind in enumerate(kinds):
        route: Literal["chat", "completions"] = "completions" if rng.random() < 0.2 else "chat"
        body: dict[str, Any] = {"model": "lab", "stream": True}
        if route == "chat":
            body["messages"] = [{"role": "user", "content": f"Soak question {index}."}]
        else:
            body["prompt"] = f"Soak prompt {index}:"
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
        if kind.long:
            body["max_tokens"] = shape.long_tokens
            body["ignore_eos"] = True
        disconnect_after = None
        if kind.reader == "disconnect":
            disconnect_after = -1 if rng.random() < 0.1 else rng.randint(0, 35)
        plans.append(
            StreamPlan(
                index=index,
                request_id=f"soak-{shape.seed}-{index:05d}",
                kind=kind,
                start_s=index * spacing + rng.uniform(0, spacing),
                route=route,
                fault=kind.fault(rng, shape) if kind.fault is not None else None,
                body=body,
                disconnect_after=disconnect_after,
                abort=rng.random() < 0.5,
            )
        )
    return plans
