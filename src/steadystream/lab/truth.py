"""Ground truth: what the lab did to one request, and why, as records and timelines.

A :class:`RequestTruth` is filled in by the scheduler (admitted, preempted, finished, KV
freed) and by the stream writer (each event's planned and actual write time). It is the
answer key that measurement, pacing, failover and attribution are scored against.

In JSON (``GET /lab/requests/{id}``) and in timelines, times are integer nanoseconds from the
request's arrival at the lab. The timeline (``where = lab``) has one event per SSE event the
lab wrote, timed at its actual write, with a ``cause`` annotation (the main cause of the gap
that ends at the event), ``causes`` (all of them, ``+``-joined, largest first) and
``cause_ns`` (the delay each of them added to the gap, in ns: ``queueing=120000000+...``).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from steadystream._types import Event, EventKind, Outcome, Where
from steadystream.lab.causes import Cause
from steadystream.timeline import Timeline

__all__ = ["RequestTruth", "TruthStore"]


@dataclass(slots=True, eq=False)
class RequestTruth:
    """Everything the lab knows about one request. Times are absolute clock ns."""

    request_id: str
    model: str
    endpoint: str  # the API it came through: chat, completions, responses or messages
    stream: bool
    ordinal: int
    arrival_ns: int
    prompt_tokens: int
    target_tokens: int
    fault: str = ""
    started_at: float = field(default_factory=time.time)
    # per SSE event written; typed arrays, which the garbage collector need not scan
    kinds: array[int] = field(default_factory=lambda: array("b"))
    planned_ns: array[int] = field(default_factory=lambda: array("q"))
    written_ns: array[int] = field(default_factory=lambda: array("q"))
    tokens: array[int] = field(default_factory=lambda: array("l"))
    wire_bytes: array[int] = field(default_factory=lambda: array("l"))
    causes: list[tuple[Cause, ...]] = field(default_factory=list)
    extra_ns: list[dict[str, int] | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    # scheduler instants
    admitted_ns: list[int] = field(default_factory=list)
    preempted_ns: list[int] = field(default_factory=list)
    first_token_ns: int | None = None
    finished_ns: int | None = None
    disconnect_noticed_ns: int | None = None
    kv_freed_ns: int | None = None  # when the scheduler really freed the KV blocks
    kv_freed_step_ns: int | None = None  # the planned start of the boundary that freed them
    end_ns: int | None = None
    tokens_generated: int = 0
    tokens_written: int = 0
    tokens_after_disconnect: int = 0
    finish_reason: str | None = None  # stop, length, error, reset, cancelled, shutdown
    # delay between the last event and the end ([DONE], close), by cause: a silent finish
    end_extra_ns: dict[str, int] | None = None
    stream_done: bool = False
    engine_done: bool = False

    def add_event(
        self,
        kind: EventKind,
        planned_ns: int,
        written_ns: int,
        tokens: int,
        wire_bytes: int,
        text: str = "",
        causes: tuple[Cause, ...] = (),
        extra_ns: dict[str, int] | None = None,
    ) -> None:
        self.kinds.append(int(kind))
        self.planned_ns.append(planned_ns)
        self.written_ns.append(written_ns)
        self.tokens.append(tokens)
        self.wire_bytes.append(wire_bytes)
        self.texts.append(text)
        self.causes.append(causes)
        self.extra_ns.append(extra_ns)
        self.tokens_written += tokens

    @property
    def done(self) -> bool:
        """Both the stream and the scheduler are finished with this request."""
        return self.stream_done and self.engine_done

    @property
    def outcome(self) -> Outcome:
        reason = self.finish_reason
        if reason in ("stop", "length"):
            return Outcome.COMPLETE
        if reason == "cancelled":
            return Outcome.CANCELLED
        if reason == "reset":
            return Outcome.TRUNCATED
        if reason is None:
            return Outcome.TRUNCATED
        return Outcome.ERROR

    # -- views ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The record as served at ``/lab/requests/{id}``: times in ns from arrival."""
        origin = self.arrival_ns

        def rel(value: int | None) -> int | None:
            return None if value is None else value - origin

        events = [
            {
                "kind": EventKind(kind).name.lower(),
                "planned_ns": planned - origin,
                "written_ns": written - origin,
                "tokens": tokens,
                "wire_bytes": wire,
                "causes": [cause.value for cause in causes],
                "extra_ns": extra or {},
            }
            for kind, planned, written, tokens, wire, causes, extra in zip(
                self.kinds,
                self.planned_ns,
                self.written_ns,
                self.tokens,
                self.wire_bytes,
                self.causes,
                self.extra_ns,
                strict=True,
            )
        ]
        return {
            "request_id": self.request_id,
            "model": self.model,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "fault": self.fault,
            "started_at": self.started_at,
            "prompt_tokens": self.prompt_tokens,
            "target_tokens": self.target_tokens,
            "tokens_generated": self.tokens_generated,
            "tokens_written": self.tokens_written,
            "tokens_after_disconnect": self.tokens_after_disconnect,
            "finish_reason": self.finish_reason,
            "outcome": self.outcome.value,
            "done": self.done,
            "admitted_ns": [rel(t) for t in self.admitted_ns],
            "preempted_ns": [rel(t) for t in self.preempted_ns],
            "first_token_ns": rel(self.first_token_ns),
            "finished_ns": rel(self.finished_ns),
            "disconnect_noticed_ns": rel(self.disconnect_noticed_ns),
            "kv_freed_ns": rel(self.kv_freed_ns),
            "kv_freed_step_ns": rel(self.kv_freed_step_ns),
            "end_ns": rel(self.end_ns),
            "end_extra_ns": self.end_extra_ns or {},
            "events": events,
        }

    def to_timeline(self, *, keep_text: bool = False) -> Timeline:
        """The request as the lab wrote it (``where = lab``), causes as per-gap annotations."""
        origin = self.arrival_ns
        events = [
            Event(written - origin, text, tokens, EventKind(kind), wire)
            for kind, written, tokens, wire, text in zip(
                self.kinds, self.written_ns, self.tokens, self.wire_bytes, self.texts, strict=True
            )
        ]
        main: list[str | None] = [c[0].value if c else None for c in self.causes]
        every: list[str | None] = ["+".join(x.value for x in c) if c else None for c in self.causes]
        shares = [_delays(extra) for extra in self.extra_ns]
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.tokens_written,
            "total_tokens": self.prompt_tokens + self.tokens_written,
        }
        timeline = Timeline.from_events(
            events,
            stream_id=self.request_id,
            where=Where.LAB,
            keep_text=keep_text,
            end_ns=None if self.end_ns is None else self.end_ns - origin,
            outcome=self.outcome,
            error=None if self.outcome is Outcome.COMPLETE else self.finish_reason,
            usage=usage,
            labels={"model": self.model, "endpoint": self.endpoint},
            started_at=self.started_at,
            annotations={"cause": main, "causes": every, "cause_ns": shares},
        )
        timeline.meta.update(self._instants())
        return timeline

    def _instants(self) -> dict[str, Any]:
        origin = self.arrival_ns

        def rel(value: int | None) -> int | None:
            return None if value is None else value - origin

        return {
            "admitted_ns": [t - origin for t in self.admitted_ns],
            "preempted_ns": [t - origin for t in self.preempted_ns],
            "finished_ns": rel(self.finished_ns),
            "disconnect_noticed_ns": rel(self.disconnect_noticed_ns),
            "kv_freed_ns": rel(self.kv_freed_ns),
            "kv_freed_step_ns": rel(self.kv_freed_step_ns),
            "tokens_generated": self.tokens_generated,
            "tokens_after_disconnect": self.tokens_after_disconnect,
            "fault": self.fault,
            "end_extra_ns": self.end_extra_ns or {},
        }


def _delays(extra: dict[str, int] | None) -> str | None:
    """A gap's delay by cause, largest first: ``prefill-interference=420000000+...`` (ns)."""
    if not extra:
        return None
    named = sorted(
        ((ns, cause) for cause, ns in extra.items() if ns > 0), key=lambda p: (-p[0], p[1])
    )
    return "+".join(f"{cause}={ns}" for ns, cause in named) or None


class TruthStore:
    """The most recent ``keep`` records, by request id (oldest dropped first)."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._records: dict[str, RequestTruth] = {}

    def add(self, truth: RequestTruth) -> None:
        self._records[truth.request_id] = truth
        while len(self._records) > self._keep:
            del self._records[next(iter(self._records))]

    def get(self, request_id: str) -> RequestTruth | None:
        return self._records.get(request_id)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._records

    def __len__(self) -> int:
        return len(self._records)

    def ids(self) -> list[str]:
        return list(self._records)

    def records(self) -> Sequence[RequestTruth]:
        return list(self._records.values())
