"""The per-connection delivery model: when an event the engine released is written.

Real streams cross proxies, kernels and radio links that delay, bunch and freeze them. The
lab plays that part itself, per connection, so the delay it adds is known:

- ``base_delay``: every event later by the same amount (shifts the stream, no gap changes);
- ``jitter``: each event later by a uniform draw in ``[0, jitter)``, order kept (TCP);
- ``coalesce`` (Nagle-like): a write goes out no sooner than ``coalesce`` after the previous
  one, carrying every event that became ready meanwhile;
- hiccups: with a probability per event, the connection freezes for a drawn length and
  everything queues behind it.

Delay that lengthens a gap is charged to ``network-buffering`` (base, jitter, coalescing) or
``connection-hiccup`` (freezes). The model is pure: it plans write times, it never waits.
"""

from __future__ import annotations

import numpy as np

from steadystream.lab.causes import Cause, Extras, absorb, charge
from steadystream.lab.scenario import NetworkParams

__all__ = ["ConnectionModel"]


def _ns(ms: float) -> int:
    return round(ms * 1_000_000)


class ConnectionModel:
    """Plans the write time of each event on one connection, in order."""

    __slots__ = (
        "_base",
        "_coalesce",
        "_hiccup_max",
        "_hiccup_min",
        "_hiccup_p",
        "_hiccup_until",
        "_jitter",
        "_last_write",
        "_prev_delay",
        "_rng",
        "active",
    )

    def __init__(self, params: NetworkParams, rng: np.random.Generator) -> None:
        self._base = _ns(params.base_delay_ms)
        self._jitter = _ns(params.jitter_ms)
        self._coalesce = _ns(params.coalesce_ms)
        self._hiccup_p = params.hiccup_probability
        self._hiccup_min = _ns(params.hiccup_min_ms)
        self._hiccup_max = _ns(params.hiccup_max_ms)
        self._rng = rng
        self._last_write: int | None = None
        self._hiccup_until = 0
        self._prev_delay = 0
        self.active = bool(self._base or self._jitter or self._coalesce or self._hiccup_p)

    def plan_write(self, release_ns: int, extras: Extras) -> int:
        """The planned write time of an event released at ``release_ns``.

        Charges the change in this event's network delay to ``extras`` (or absorbs it).
        """
        if not self.active:
            return release_ns
        t = release_ns + self._base
        if self._jitter:
            t += int(self._rng.random() * self._jitter)
        last = self._last_write
        if last is not None:
            if t <= last:
                t = last  # the previous write is still waiting: go out with it
            elif self._coalesce and t < last + self._coalesce:
                t = last + self._coalesce
        unfrozen = t
        if self._hiccup_p and self._rng.random() < self._hiccup_p:
            span = self._hiccup_max - self._hiccup_min
            length = self._hiccup_min + int(self._rng.random() * span)
            self._hiccup_until = max(self._hiccup_until, t + length)
        t = max(t, self._hiccup_until)
        delay = t - release_ns - self._base
        change = delay - self._prev_delay
        self._prev_delay = delay
        if change > 0:
            frozen = min(change, t - unfrozen)
            charge(extras, Cause.CONNECTION_HICCUP, frozen)
            charge(extras, Cause.NETWORK_BUFFERING, change - frozen)
        else:
            absorb(extras, -change)
        self._last_write = t
        return t
