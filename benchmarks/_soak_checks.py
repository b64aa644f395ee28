"""The soak's verdicts: each check reads what the run left behind and says pass or fail, why.

Inputs: the plans and what each client saw, the gateway's recordings (both edges of every
stream), the labs' ground truth (every upstream request, joined by the ids the gateway sent),
the gateway's resident memory over time, and every file the gateway wrote. Pure: no I/O but
reading the files it is handed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from _soak_client import PIECE, ClientResult, key_pieces
from _soak_plan import StreamPlan
from steadystream import Timeline, Where

__all__ = [
    "Check",
    "Limits",
    "cancel_latencies_ms",
    "check_cancel",
    "check_keys",
    "check_open_upstreams",
    "check_records",
    "check_rss",
    "check_truncation",
    "theil_sen_slope",
]

_SHOW = 5  # examples named per failure


@dataclass(frozen=True)
class Limits:
    """What the checks hold the run to."""

    cancel_p99_ms: float = 100.0
    rss_slope_mib_per_min: float = 2.0
    finish_bound_s: float = 10.0  # a finish, then [DONE] at the client within this long


@dataclass
class Check:
    name: str
    ok: bool
    summary: str
    details: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def _examples(ids: Iterable[str]) -> str:
    ids = list(ids)
    more = f" (+{len(ids) - _SHOW} more)" if len(ids) > _SHOW else ""
    return ", ".join(ids[:_SHOW]) + more


# -- records ------------------------------------------------------------------------------------


def _expected(plan: StreamPlan, result: ClientResult | None, record: Timeline) -> frozenset[str]:
    """The outcomes a stream may have. A client that meant to leave mid-answer but read the
    whole answer first (a busy machine delays the reader, not the relay) saw it complete."""
    if plan.kind.reader != "disconnect" or result is None:
        return plan.kind.expected
    if result.left_at is None:
        return frozenset({"complete"})
    started, end = record.started_at, record.end_ns
    if started is not None and end is not None and started + end / 1e9 <= result.left_at:
        return frozenset({"complete", *plan.kind.expected})
    return plan.kind.expected


def check_records(
    plans: Sequence[StreamPlan],
    timelines: Iterable[Timeline],
    results: Mapping[str, ClientResult],
) -> tuple[Check, dict[str, Timeline]]:
    """Every stream has exactly one record per edge, and the outcome its kind must have."""
    edges: dict[str, dict[Where, list[Timeline]]] = defaultdict(lambda: defaultdict(list))
    for timeline in timelines:
        edges[timeline.stream_id][timeline.where].append(timeline)
    planned = {plan.request_id for plan in plans}
    downstream: dict[str, Timeline] = {}
    missing, doubled, wrong = [], [], defaultdict(list)
    outcomes: Counter[str] = Counter()
    for plan in plans:
        found = edges.get(plan.request_id, {})
        down = found.get(Where.GATEWAY_DOWNSTREAM, [])
        up = found.get(Where.GATEWAY_UPSTREAM, [])
        if not down or not up:
            missing.append(plan.request_id)
            continue
        if len(down) > 1 or len(up) > 1:
            doubled.append(plan.request_id)
        record = down[0]
        downstream[plan.request_id] = record
        outcome = record.outcome.value
        outcomes[f"{plan.kind.name}: {outcome}"] += 1
        if outcome not in _expected(plan, results.get(plan.request_id), record):
            wrong[plan.kind.name].append(f"{plan.request_id} {outcome} ({record.error or ''})")
    extra = sorted(set(edges) - planned)
    details = [f"no record: {_examples(missing)}"] if missing else []
    details += [f"more than one record: {_examples(doubled)}"] if doubled else []
    details += [f"records of no planned stream: {_examples(extra)}"] if extra else []
    for kind, cases in sorted(wrong.items()):
        expected = "/".join(sorted(next(p.kind.expected for p in plans if p.kind.name == kind)))
        details.append(f"{kind}: {len(cases)} not {expected}: {_examples(cases)}")
    bad = len(missing) + len(doubled) + len(extra) + sum(len(v) for v in wrong.values())
    summary = (
        f"{len(plans) - len(missing)}/{len(plans)} streams recorded, {len(missing)} lost, "
        f"{len(doubled)} doubled, {sum(len(v) for v in wrong.values())} with a wrong outcome"
    )
    figures = {"lost": len(missing), "doubled": len(doubled), "outcomes": dict(outcomes)}
    return Check("one record, right outcome", bad == 0, summary, details, figures), downstream


# -- the labs' ground truth ------------------------------------------------------------------------


def check_open_upstreams(truths: Mapping[str, Mapping[str, Any]], echoes: int) -> Check:
    """No upstream stream is left open (lab ground truth), and the key probes really fired."""
    still_open = sorted(rid for rid, truth in truths.items() if not truth["done"])
    echoed = sum(
        1 for t in truths.values() if "echo-auth" in t["fault"] and t["outcome"] == "error"
    )
    details = [f"open at the lab: {_examples(still_open)}"] if still_open else []
    if echoed < echoes:
        details.append(f"only {echoed} of {echoes} echo-auth streams echoed a key at the lab")
    return Check(
        "upstream streams closed",
        not still_open and echoed >= echoes,
        f"{len(truths)} upstream requests, {len(still_open)} left open; {echoed} echoed their key",
        details,
        {"upstream_requests": len(truths), "open": len(still_open), "echoed": echoed},
    )


def cancel_latencies_ms(
    plans: Sequence[StreamPlan],
    results: Mapping[str, ClientResult],
    records: Mapping[str, Timeline],
    truths: Mapping[str, Mapping[str, Any]],
) -> tuple[list[float], list[float], Counter[str]]:
    """Client left -> the lab noticed, and -> the lab freed the sequence (ms), per disconnect.

    A disconnect the lab never saw mid-generation (the client left before the gateway asked
    the lab, or after the lab had finished) has no cancel to time; those are counted.
    """
    noticed, freed = [], []
    skipped: Counter[str] = Counter()
    for plan in plans:
        result = results.get(plan.request_id)
        if plan.kind.reader != "disconnect" or result is None or result.left_at is None:
            continue
        record = records.get(plan.request_id)
        attempts = record.meta.get("attempts", []) if record is not None else []
        if not attempts:
            skipped["left before the gateway asked an upstream"] += 1
            continue
        truth = truths.get(attempts[-1]["request_id"])
        if truth is None or truth.get("disconnect_noticed_ns") is None:
            skipped["the lab had already finished"] += 1
            continue
        origin = truth["started_at"]
        noticed.append((origin + truth["disconnect_noticed_ns"] / 1e9 - result.left_at) * 1e3)
        freed.append((origin + truth["kv_freed_ns"] / 1e9 - result.left_at) * 1e3)
    return noticed, freed, skipped


def check_cancel(
    noticed: Sequence[float], freed: Sequence[float], skipped: Counter[str], limits: Limits
) -> Check:
    if not freed:
        return Check("cancel at the engine", False, "no disconnect reached the engine to time")
    p99 = float(np.percentile(freed, 99))
    figures = {
        "timed": len(freed),
        "noticed_p50_ms": float(np.percentile(noticed, 50)),
        "noticed_p99_ms": float(np.percentile(noticed, 99)),
        "freed_p50_ms": float(np.percentile(freed, 50)),
        "freed_p99_ms": p99,
        "freed_max_ms": float(max(freed)),
        "not_timed": dict(skipped),
    }
    summary = (
        f"client left -> lab freed the sequence: p50 {figures['freed_p50_ms']:.1f} ms, "
        f"p99 {p99:.1f} ms, max {figures['freed_max_ms']:.1f} ms over {len(freed)} "
        f"(lab noticed: p99 {figures['noticed_p99_ms']:.1f} ms); limit {limits.cancel_p99_ms:g} ms"
    )
    details = [f"not timed: {n} ({why})" for why, n in skipped.items()]
    return Check("cancel at the engine", p99 <= limits.cancel_p99_ms, summary, details, figures)


# -- what the clients saw -------------------------------------------------------------------------


def check_truncation(
    plans: Sequence[StreamPlan], results: Mapping[str, ClientResult], limits: Limits
) -> Check:
    """Every client that read to the end got [DONE] after a finish or an in-band error, in
    time; none got a chunk that is not JSON; none was left hanging."""
    silent, hung, late, malformed = [], [], [], []
    for plan in plans:
        result = results[plan.request_id]
        if result.bad_chunks:
            malformed.append(plan.request_id)
        if result.ended == "deadline":
            hung.append(f"{plan.request_id} ({plan.kind.name})")
        if plan.kind.reader not in ("healthy", "slow"):
            continue
        if not result.answered:
            silent.append(f"{plan.request_id} ({plan.kind.name}, {result.ended})")
        elif result.finish_at is not None and result.end_at is not None:
            tail = result.end_at - result.finish_at
            if tail > limits.finish_bound_s:
                late.append(f"{plan.request_id} ({plan.kind.name}, {tail:.1f}s)")
    details = []
    if silent:
        details.append(f"no [DONE] after a finish or an error: {_examples(silent)}")
    if hung:
        details.append(f"still open at the client's deadline: {_examples(hung)}")
    if late:
        details.append(
            f"[DONE] over {limits.finish_bound_s:g}s after the finish: {_examples(late)}"
        )
    if malformed:
        details.append(f"a chunk that is not JSON reached the client: {_examples(malformed)}")
    bad = len(silent) + len(hung) + len(late) + len(malformed)
    summary = (
        f"{len(silent)} silent truncations, {len(hung)} hung, {len(late)} ended late after "
        f"their finish, {len(malformed)} got a malformed chunk"
    )
    figures = {"silent": len(silent), "hung": len(hung), "late": len(late)}
    figures["malformed"] = len(malformed)
    return Check("no silent truncation", bad == 0, summary, details, figures)


# -- secrets ------------------------------------------------------------------------------------


def check_keys(
    secrets: Mapping[str, str],
    files: Iterable[Path],
    texts: Mapping[str, str],
    results: Mapping[str, ClientResult],
) -> Check:
    """No secret in any file the gateway wrote (logs, recordings), in its metrics, or in what
    any client received (upstream keys only: a client sent its own tenant key)."""
    found: list[str] = []
    scanned = 0
    places = [(path.name, path.read_bytes()) for path in files]
    places += [(where, text.encode()) for where, text in texts.items()]
    for where, data in places:
        scanned += len(data)
        for name, value in secrets.items():
            if any(piece in data for piece in key_pieces(value)):
                whole = "" if value.encode() in data else f" (a {PIECE}+ character piece)"
                found.append(f"{name} in {where}{whole}")
    clients = Counter(
        name for r in results.values() for name in r.leaked if not name.startswith("tenant")
    )
    found += [f"{name} reached {n} clients" for name, n in clients.items()]
    summary = f"{len(found)} places hold a key ({scanned / 1e6:.1f} MB of logs, records, metrics)"
    return Check("no key anywhere", not found, summary, found, {"found": found})


# -- memory -------------------------------------------------------------------------------------


def theil_sen_slope(times_s: Sequence[float], values: Sequence[float]) -> float:
    """The median of pairwise slopes: a trend that one spike (an 8 MB event) cannot tilt."""
    t = np.asarray(times_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    keep = dt > 0
    if not keep.any():
        return 0.0
    return float(np.median((v[j] - v[i])[keep] / dt[keep]))


def check_rss(samples: Sequence[tuple[float, int]], limits: Limits) -> Check:
    """The gateway's resident memory levels off: its slope over the last half of the load."""
    if len(samples) < 4:
        return Check("gateway RSS bounded", False, "too few RSS samples")
    half = samples[len(samples) // 2 :]
    slope = theil_sen_slope([t for t, _ in half], [r for _, r in half]) * 60 / 2**20
    rss = [r / 2**20 for _, r in samples]
    figures = {
        "start_mib": rss[0],
        "peak_mib": max(rss),
        "end_mib": rss[-1],
        "slope_last_half_mib_per_min": slope,
    }
    summary = (
        f"RSS {rss[0]:.0f} MiB at start, peak {max(rss):.0f}, end {rss[-1]:.0f}; slope over "
        f"the last half {slope:+.2f} MiB/min (limit {limits.rss_slope_mib_per_min:g})"
    )
    return Check("gateway RSS bounded", slope <= limits.rss_slope_mib_per_min, summary, [], figures)
