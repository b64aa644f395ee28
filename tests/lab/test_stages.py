"""Emission and the connection model: the delay they add, and the causes it is charged to."""

from __future__ import annotations

import itertools

import numpy as np

from steadystream.lab.causes import Cause, absorb, charge, labels
from steadystream.lab.emission import Emitter
from steadystream.lab.network import ConnectionModel
from steadystream.lab.scenario import EmissionParams, NetworkParams

MS = 1_000_000


def _connection(**params: float) -> ConnectionModel:
    return ConnectionModel(NetworkParams(**params), np.random.default_rng(0))


def test_causes_absorb_in_proportion_and_label_largest_first() -> None:
    extras: dict[Cause, int] = {}
    charge(extras, Cause.QUEUEING, 300 * MS)
    charge(extras, Cause.PREFILL_INTERFERENCE, 100 * MS)
    charge(extras, Cause.HEAD_BURST, 0)
    assert labels(extras, MS) == (Cause.QUEUEING, Cause.PREFILL_INTERFERENCE)
    absorb(extras, 200 * MS)
    assert extras == {Cause.QUEUEING: 150 * MS, Cause.PREFILL_INTERFERENCE: 50 * MS}
    absorb(extras, 500 * MS)
    assert extras == {}


def test_grouping_waits_for_k_tokens_and_is_not_labelled() -> None:
    emitter = Emitter(EmissionParams(tokens_per_event=3), _connection())
    planned = []
    for step in range(1, 8):
        planned += emitter.feed(step * 10 * MS, 1, None, final=step == 7)
    assert [(e.first_token, e.tokens, e.planned_ns) for e in planned] == [
        (0, 3, 30 * MS),
        (3, 3, 60 * MS),
        (6, 1, 70 * MS),
    ]
    assert all(e.extras == {} for e in planned)


def test_head_burst_holds_then_paces_the_tail() -> None:
    params = EmissionParams(head_burst_tokens=3, tail_interval_ms=50)
    emitter = Emitter(params, _connection())
    events = []
    for step in range(1, 7):
        events += emitter.feed(step * 10 * MS, 1, None, final=False)
    assert [e.planned_ns for e in events] == [30 * MS] * 3 + [80 * MS, 130 * MS, 180 * MS]
    assert events[0].extras == {Cause.HEAD_BURST: 20 * MS}  # held from 10 to 30 ms
    assert events[1].extras == events[2].extras == {}
    assert events[3].extras == {Cause.HEAD_BURST: 40 * MS}  # 50 ms apart instead of 10
    assert events[4].extras == {Cause.HEAD_BURST: 40 * MS}


def test_coalescing_merges_writes_and_charges_network_buffering() -> None:
    connection = _connection(coalesce_ms=40)
    extras: list[dict[Cause, int]] = [{} for _ in range(4)]
    times = [
        connection.plan_write(t * MS, e) for t, e in zip((0, 10, 30, 100), extras, strict=True)
    ]
    assert times == [0, 40 * MS, 40 * MS, 100 * MS]
    assert extras[1] == {Cause.NETWORK_BUFFERING: 30 * MS}
    assert extras[2] == {}  # it rides along with the held write
    assert extras[3] == {}


def test_hiccups_freeze_the_connection_and_keep_order() -> None:
    connection = _connection(hiccup_probability=1.0, hiccup_min_ms=500, hiccup_max_ms=500)
    extras: list[dict[Cause, int]] = [{}, {}]
    first = connection.plan_write(0, extras[0])
    second = connection.plan_write(10 * MS, extras[1])
    assert first == 500 * MS
    assert extras[0] == {Cause.CONNECTION_HICCUP: 500 * MS}
    assert second == 1000 * MS  # its own freeze starts where the first write went out
    assert extras[1] == {Cause.CONNECTION_HICCUP: 490 * MS}  # the gap grew 490 ms, not 500


def test_base_delay_shifts_without_labelling_and_jitter_keeps_order() -> None:
    connection = _connection(base_delay_ms=30)
    extras: dict[Cause, int] = {}
    assert connection.plan_write(5 * MS, extras) == 35 * MS
    assert extras == {}
    jittery = _connection(jitter_ms=20)
    times = [jittery.plan_write(t * MS, {}) for t in range(0, 100, 2)]
    assert times == sorted(times)
    assert any(b - a != 2 * MS for a, b in itertools.pairwise(times))
