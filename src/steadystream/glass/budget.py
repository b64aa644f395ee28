"""How much glass one client may post: a token bucket of posts and one of bytes per client.

A report costs disk whoever sends it, so each client (a tenant, or an address on an open
gateway: the app says which) gets ``posts_per_s`` reports and ``bytes_per_s`` of them, with
bursts up to ``post_burst`` and ``byte_burst``; past that a post waits, and is told how long.
Time is the injected clock's (``now_ns``), so the limit is tested in simulated time.

The table of clients is bounded (``max_clients``): past it, the client seen least recently
is forgotten. A forgotten client comes back with full buckets, which is what an idle one
would have had; one that is not idle gains at most a burst, and only by an attacker seeing
``max_clients`` other clients in between.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response

from steadystream._api_errors import ApiError, ErrorShape
from steadystream._clock import NS_PER_S

__all__ = ["ClientBudgets", "OverBudget", "retry_after"]

_MOST_WAIT_S = 86_400.0


@dataclass(slots=True)
class _Buckets:
    posts: float
    bytes: float
    at_ns: int


class ClientBudgets:
    """Per-client post and byte buckets (see the module docstring)."""

    def __init__(
        self,
        *,
        posts_per_s: float,
        post_burst: int,
        bytes_per_s: int,
        byte_burst: int,
        max_clients: int,
        now_ns: Callable[[], int],
    ) -> None:
        if min(posts_per_s, post_burst, bytes_per_s, byte_burst, max_clients) <= 0:
            raise ValueError("every rate, burst and bound of the glass budgets must be positive")
        self.posts_per_s = posts_per_s
        self.post_burst = post_burst
        self.bytes_per_s = bytes_per_s
        self.byte_burst = byte_burst
        self.max_clients = max_clients
        self._now_ns = now_ns
        self._clients: OrderedDict[str, _Buckets] = OrderedDict()

    def __len__(self) -> int:
        return len(self._clients)

    def take_post(self, client: str) -> float:
        """Take one post from ``client``'s bucket: 0.0 when taken, else the seconds until one
        is there (nothing taken)."""
        buckets = self._refilled(client)
        if buckets.posts >= 1:
            buckets.posts -= 1
            return 0.0
        return (1 - buckets.posts) / self.posts_per_s

    def take_bytes(self, client: str, size: int) -> float:
        """Take ``size`` bytes (at most ``byte_burst``) from ``client``'s bucket: 0.0 when
        taken, else the seconds until they are there (nothing taken)."""
        buckets = self._refilled(client)
        size = min(size, self.byte_burst)
        if buckets.bytes >= size:
            buckets.bytes -= size
            return 0.0
        return (size - buckets.bytes) / self.bytes_per_s

    def _refilled(self, client: str) -> _Buckets:
        now = self._now_ns()
        buckets = self._clients.get(client)
        if buckets is None:
            while len(self._clients) >= self.max_clients:
                self._clients.popitem(last=False)
            buckets = self._clients[client] = _Buckets(self.post_burst, self.byte_burst, now)
            return buckets
        self._clients.move_to_end(client)
        elapsed_s = max(0, now - buckets.at_ns) / NS_PER_S
        buckets.posts = min(self.post_burst, buckets.posts + elapsed_s * self.posts_per_s)
        buckets.bytes = min(self.byte_burst, buckets.bytes + elapsed_s * self.bytes_per_s)
        buckets.at_ns = now
        return buckets


def retry_after(wait_s: float) -> str:
    """A wait as a ``Retry-After`` value: whole seconds, rounded up, at least 1 and at most
    a day (a rate of a few reports a year, or a subnormal one, would wait years: infinity)."""
    return str(max(1, math.ceil(min(wait_s, _MOST_WAIT_S))))


class OverBudget(ApiError):
    """429: a client past its glass budget, told (``Retry-After``) when to post again."""

    def __init__(self, what: str, wait_s: float) -> None:
        self.retry_after = retry_after(wait_s)
        super().__init__(
            429,
            f"this client is past its glass budget of {what}; retry after {self.retry_after} s",
            type="rate_limit_error",
            code="glass_rate_limited",
        )

    def response(
        self, headers: dict[str, str] | None = None, shape: ErrorShape = "openai"
    ) -> Response:
        return super().response({**(headers or {}), "Retry-After": self.retry_after}, shape)
