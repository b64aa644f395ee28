"""How faithfully the client measured: its timelines against the lab's ground truth.

For one request the lab knows the instant it wrote each SSE event to the socket; the client
knows the instant each event's bytes reached it. Their gaps between consecutive content
events should agree: any difference is measurement error (client event-loop lag, buffering,
parsing before stamping) plus loopback transit jitter. :func:`compare_stream` pairs the two
timelines' content events in order and returns the per-gap errors, with TTFT and worst gap
from both sides; :func:`lab_timeline` rebuilds a lab timeline from the JSON of
``GET /lab/requests/{id}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream._exceptions import ProtocolError
from steadystream._types import Event, EventKind, Where
from steadystream.timeline import Timeline

__all__ = ["StreamFidelity", "compare_stream", "error_percentiles", "lab_timeline"]


@dataclass(frozen=True, slots=True)
class StreamFidelity:
    """One stream seen by the client and by the lab. Times in ns."""

    stream_id: str
    paired_events: int
    ttft_client_ns: int | None
    ttft_lab_ns: int | None
    max_gap_client_ns: int | None
    max_gap_lab_ns: int | None
    gap_errors_ns: npt.NDArray[np.int64]  # |client gap - lab gap|, one per paired gap


def compare_stream(client: Timeline, lab: Timeline) -> StreamFidelity:
    """Pair content events in order (the shorter stream bounds the pairs) and compare."""
    client_times = client.times[client.text_mask]
    lab_times = lab.times[lab.text_mask]
    n = min(len(client_times), len(lab_times))
    client_times, lab_times = client_times[:n], lab_times[:n]
    client_gaps, lab_gaps = np.diff(client_times), np.diff(lab_times)
    return StreamFidelity(
        stream_id=client.stream_id,
        paired_events=n,
        ttft_client_ns=int(client_times[0]) if n else None,
        ttft_lab_ns=int(lab_times[0]) if n else None,
        max_gap_client_ns=int(client_gaps.max()) if n > 1 else None,
        max_gap_lab_ns=int(lab_gaps.max()) if n > 1 else None,
        gap_errors_ns=np.abs(client_gaps - lab_gaps).astype(np.int64),
    )


def error_percentiles(
    errors_ns: npt.NDArray[np.int64], qs: tuple[float, ...] = (50, 99, 100)
) -> list[float]:
    """Percentiles of gap errors, in ms (NaN when there is none)."""
    if len(errors_ns) == 0:
        return [float("nan")] * len(qs)
    return [float(v) / 1e6 for v in np.percentile(errors_ns, qs)]


_KINDS = {kind.name.lower(): kind for kind in EventKind}


def lab_timeline(record: Mapping[str, Any]) -> Timeline:
    """A ``where = lab`` timeline from a ``/lab/requests/{id}`` record (times from arrival)."""
    try:
        events = [
            Event(
                int(e["written_ns"]),
                "",
                int(e["tokens"]),
                _KINDS[e["kind"]],
                int(e.get("wire_bytes") or 0),
            )
            for e in record["events"]
        ]
        request_id = str(record["request_id"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"not a lab ground-truth record: {exc!r}") from exc
    return Timeline.from_events(events, stream_id=request_id, where=Where.LAB, keep_text=False)
