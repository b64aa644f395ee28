"""The recorded streams a replay serves, and the plan each one becomes for a request.

A run may hold several vantage points of the same streams (client, gateway edges, lab); the
replay plays one of them: ``where`` if given, else the client's timelines when there are any,
else those of the first vantage point in the file. Streams with no text event are skipped:
there is nothing to play; ``only`` narrows them by id (shell patterns: ``steady-*``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from steadystream._exceptions import InputError
from steadystream._types import EventKind, Where
from steadystream.lab.text import pseudo_text
from steadystream.replay.inject import Plan
from steadystream.timeline import Timeline

__all__ = ["RecordedStreams", "plan_of"]


@dataclass(frozen=True, slots=True)
class RecordedStreams:
    """The playable streams of a run, by id and in file order."""

    streams: tuple[Timeline, ...]
    where: Where

    @classmethod
    def choose(
        cls,
        timelines: Sequence[Timeline],
        where: Where | str | None = None,
        only: Sequence[str] = (),
    ) -> RecordedStreams:
        """The streams to play; ``only`` keeps the ids that match a shell pattern of it."""
        present = list(dict.fromkeys(t.where for t in timelines))
        if not present:
            raise InputError("the run has no streams to replay")
        if where is not None:
            try:
                chosen = Where(where)
            except ValueError:
                names = ", ".join(w.value for w in Where)
                raise InputError(
                    f"where: unknown vantage point {where!r} (one of: {names})"
                ) from None
            if chosen not in present:
                names = ", ".join(w.value for w in present)
                raise InputError(
                    f"where: the run has no {chosen.value!r} timelines (it has: {names})"
                )
        else:
            chosen = Where.CLIENT if Where.CLIENT in present else present[0]
        playable = tuple(t for t in timelines if t.where is chosen and t.text_mask.any())
        if not playable:
            raise InputError(f"the run's {chosen.value!r} timelines carry no text event to replay")
        if only:
            playable = tuple(
                t for t in playable if any(fnmatch.fnmatchcase(t.stream_id, p) for p in only)
            )
            if not playable:
                raise InputError(f"only: no recorded stream id matches {', '.join(only)}")
        return cls(playable, chosen)

    def __len__(self) -> int:
        return len(self.streams)

    def by_id(self, stream_id: str) -> Timeline | None:
        for timeline in self.streams:
            if timeline.stream_id == stream_id:
                return timeline
        return None


def plan_of(timeline: Timeline, rng: np.random.Generator) -> Plan:
    """The content events of a recorded stream, as offsets from the request's arrival.

    Recorded text is played where it was kept; otherwise deterministic pseudo-text with the
    recorded token count per event (drawn from ``rng``, so it is the same for the same seed).
    """
    mask = timeline.text_mask
    times = [int(t) for t in timeline.times[mask]]
    tokens = [int(n) for n in timeline.tokens[mask]]
    if timeline.texts is not None:
        texts = [timeline.texts[i] for i in np.flatnonzero(mask)]
    else:
        pieces = pseudo_text(rng, sum(tokens))
        texts = []
        start = 0
        for count in tokens:
            texts.append("".join(pieces[start : start + count]))
            start += count
    roles = np.flatnonzero(timeline.kinds == EventKind.ROLE)
    role_ns = int(timeline.times[roles[0]]) if len(roles) else 0
    end = max(times[-1], timeline.end_ns or 0)
    return Plan(times, tokens, texts, end_ns=end, role_ns=min(role_ns, times[0]))
