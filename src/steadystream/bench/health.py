"""How far to trust a run: the client's own lag, and where its token counts came from.

A run is only as good as its client. The client "kept up" when:

- at most 1 % of streams were open while the event loop lagged more than
  :data:`~steadystream.bench.lag.LAG_FLAG_NS` (their stamps may be late by that much);
- with timed arrivals (open loop, trace), the 99th percentile of scheduling lag (request sent
  minus request due) is within the same bound, so the load offered was the load asked for,
  and no arrival had to wait for a free slot under ``--concurrency``.

A closed loop's scheduling lag (from a slot freeing to the next request on the wire) is
reported but not judged: the load asked for is N streams in flight, and a few milliseconds
between one stream and the next do not change it.

Otherwise the summary says so, with the numbers, before anyone reads the tail metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from steadystream._clock import NS_PER_MS
from steadystream._types import TokenSource
from steadystream.bench.lag import LAG_FLAG_NS, LagStats
from steadystream.timeline import Timeline

__all__ = ["LAGGED_SHARE_LIMIT", "ClientHealth", "client_health", "lagged_streams", "token_notes"]

LAGGED_SHARE_LIMIT = 0.01

_FLAG_MS = LAG_FLAG_NS / NS_PER_MS

_SOURCE_WORDS = {
    TokenSource.EXACT.value: "exact: the server counted every chunk (usage on each chunk)",
    TokenSource.USAGE_ONE_PER_EVENT.value: (
        "from the final usage total, which matched the chunk count: one token per chunk"
    ),
    TokenSource.USAGE_PROPORTIONAL.value: (
        "from the final usage total, spread over chunks in proportion to their text "
        "(the server sent several tokens in some chunks)"
    ),
    TokenSource.USAGE_SHARED.value: (
        "from the final usage total, which was below the chunk count (a pacer or proxy cut "
        "tokens into pieces): each chunk holds the tokens that begin in it, pieces share one"
    ),
    TokenSource.MAX_TOKENS.value: (
        "the request's max_tokens: no usage, but the stream stopped for length, so it made "
        "exactly that many"
    ),
    TokenSource.ESTIMATED.value: (
        "estimated from the text (about 4 characters a token): the server reported no "
        "completion token count"
    ),
    TokenSource.USAGE_EVEN.value: (
        "from a peer's per-request total, spread evenly over the chunks (its file kept no "
        "text to weigh them by)"
    ),
    TokenSource.UNKNOWN.value: (
        "unknown: a peer's file kept no token count; token metrics (TPOT, tokens per "
        "chunk, QoE, fluidity) are left out"
    ),
}


@dataclass(frozen=True, slots=True)
class ClientHealth:
    streams: int
    lagged: int  # streams open while the loop lagged over the flag
    loop_lag: LagStats
    schedule_lag: LagStats
    waited_for_slot: int
    timed_arrivals: bool = True

    @property
    def kept_up(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        """Why the client could not keep up with the asked load (empty: it did)."""
        found = []
        if self.streams and self.lagged > LAGGED_SHARE_LIMIT * self.streams:
            found.append(
                f"{self.lagged} of {self.streams} streams were open while the client's event "
                f"loop lagged over {_FLAG_MS:g} ms (worst {_ms(self.loop_lag.max_ms)}): "
                "their chunk stamps may be late by that much"
            )
        p99 = self.schedule_lag.p99_ms
        if self.timed_arrivals and p99 is not None and p99 > _FLAG_MS:
            found.append(
                f"requests went out late: scheduling lag p99 {_ms(p99)}, "
                f"max {_ms(self.schedule_lag.max_ms)}"
            )
        if self.waited_for_slot:
            found.append(
                f"{self.waited_for_slot} arrivals waited for a free slot under --concurrency: "
                "the asked rate was not offered"
            )
        return found

    def lines(self) -> list[str]:
        """The client's overhead in one or two lines, for every summary."""
        loop, sched = self.loop_lag, self.schedule_lag
        return [
            f"client event-loop lag p50 {_ms(loop.p50_ms)}, p99 {_ms(loop.p99_ms)}, "
            f"max {_ms(loop.max_ms)} ({loop.samples} samples); scheduling lag p50 "
            f"{_ms(sched.p50_ms)}, p99 {_ms(sched.p99_ms)}, max {_ms(sched.max_ms)}; "
            f"streams flagged (loop lag > {_FLAG_MS:g} ms): {self.lagged} of {self.streams}"
        ]


def lagged_streams(timelines: Sequence[Timeline]) -> int:
    """Streams a bench client flagged as stamped during loop lag (see ``meta``)."""
    return sum(1 for t in timelines if t.meta.get("client_lagged"))


def client_health(
    timelines: Sequence[Timeline],
    loop_lag: LagStats,
    schedule_lag: LagStats,
    waited_for_slot: int = 0,
    *,
    timed_arrivals: bool = True,
) -> ClientHealth:
    return ClientHealth(
        len(timelines),
        lagged_streams(timelines),
        loop_lag,
        schedule_lag,
        waited_for_slot,
        timed_arrivals,
    )


def token_notes(token_sources: Mapping[str, int]) -> list[str]:
    """Where the token counts came from, in words (every report says which)."""
    total = sum(token_sources.values())
    notes = []
    for source, count in sorted(token_sources.items(), key=lambda kv: -kv[1]):
        words = _SOURCE_WORDS.get(source, source)
        notes.append(f"token counts of {count} of {total} streams: {words}")
    return notes


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} ms"
