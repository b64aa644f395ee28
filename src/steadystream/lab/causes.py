"""Why a gap is longer than a plain decode step: the cause labels and how delay is split.

A chunk reaches the client through stages: the scheduler makes its tokens, emission groups
and holds them, the connection delivers them. Each stage may add delay. The delay that a
gap carries beyond the plain decode steps it spans is kept per cause, in nanoseconds:

- the scheduler charges whole or partial steps to a cause as they happen (a step spent
  waiting in the queue, the part of a step taken by someone else's prefill, ...);
- a later stage that holds event ``i`` for ``d_i`` changes the gap before it by
  ``d_i - d_{i-1}``: a positive change is charged to that stage's cause, a negative one
  means the stage's buffer hid part of the earlier delay, which is taken back from the
  causes already charged, in proportion.

The labels of a gap are the causes charged at least ``label_min_ns``, largest first.
"""

from __future__ import annotations

from steadystream._causes import Cause

__all__ = ["Cause", "Extras", "absorb", "charge", "labels", "stage_change"]


Extras = dict[Cause, int]
"""Delay beyond plain decoding, in ns, per cause."""


def charge(extras: Extras, cause: Cause, delay_ns: int) -> None:
    """Add ``delay_ns`` (when positive) to ``cause``."""
    if delay_ns > 0:
        extras[cause] = extras.get(cause, 0) + delay_ns


def absorb(extras: Extras, hidden_ns: int) -> None:
    """Take ``hidden_ns`` back from the causes charged so far, in proportion to each."""
    if hidden_ns <= 0 or not extras:
        return
    total = sum(extras.values())
    if hidden_ns >= total:
        extras.clear()
        return
    keep = (total - hidden_ns) / total
    for cause in list(extras):
        extras[cause] = int(extras[cause] * keep)


def stage_change(extras: Extras, cause: Cause, change_ns: int) -> None:
    """Apply a stage's change to the gap: charge it when positive, absorb when negative."""
    if change_ns > 0:
        charge(extras, cause, change_ns)
    elif change_ns < 0:
        absorb(extras, -change_ns)


def labels(extras: Extras, label_min_ns: int) -> tuple[Cause, ...]:
    """The causes worth naming, largest delay first."""
    named = [(ns, cause) for cause, ns in extras.items() if ns >= label_min_ns and ns > 0]
    named.sort(key=lambda pair: (-pair[0], pair[1].value))
    return tuple(cause for _, cause in named)
