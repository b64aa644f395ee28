"""The stall watchdog's pure deadlines, on plain numbers (the guard that runs them: test_guard)."""

from __future__ import annotations

import pytest

from steadystream.gateway.watchdog import StallKind, Watchdog

MS = 1_000_000


def make(first_token_ms: int = 1000, stall_ms: int = 300) -> Watchdog:
    return Watchdog(first_token_ns=first_token_ms * MS, stall_ns=stall_ms * MS)


def test_first_token_deadline_runs_from_the_request() -> None:
    watchdog = make()
    watchdog.start(100 * MS)
    assert watchdog.deadline() == 1100 * MS
    assert watchdog.expired(1099 * MS) is None
    assert watchdog.expired(1100 * MS) is StallKind.FIRST_TOKEN


def test_each_token_moves_the_stall_deadline() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.token(50 * MS)
    assert watchdog.kind is StallKind.INTER_TOKEN
    assert watchdog.deadline() == 350 * MS
    watchdog.token(200 * MS)
    assert watchdog.expired(499 * MS) is None
    assert watchdog.expired(500 * MS) is StallKind.INTER_TOKEN


def test_after_a_finish_only_the_end_of_the_body_is_due() -> None:
    watchdog = Watchdog(first_token_ns=1000 * MS, stall_ns=300 * MS, finish_ns=2000 * MS)
    watchdog.start(0)
    watchdog.token(10 * MS)
    watchdog.finish(20 * MS)
    assert watchdog.finished
    assert watchdog.deadline() == 2020 * MS  # the stall deadline no longer applies
    watchdog.token(30 * MS)  # a token after the finish does not re-arm it
    assert watchdog.expired(2019 * MS) is None
    assert watchdog.expired(2020 * MS) is StallKind.AFTER_FINISH
    watchdog.done()
    assert watchdog.deadline() is None
    assert watchdog.expired(10_000 * MS) is None


def test_time_spent_not_reading_does_not_count() -> None:
    # A slow client filled the buffer: the relay stopped reading for 2 s. Not a stall.
    watchdog = make()
    watchdog.start(0)
    watchdog.token(100 * MS)
    watchdog.pause(200 * MS)
    assert watchdog.deadline() is None
    assert watchdog.expired(5_000 * MS) is None
    watchdog.resume(2_200 * MS)
    assert watchdog.deadline() == 2_400 * MS
    watchdog.resume(2_300 * MS)  # a second resume changes nothing
    assert watchdog.deadline() == 2_400 * MS


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Watchdog(first_token_ns=0, stall_ns=1)


def test_a_waived_silence_runs_to_the_give_up_bound_then_rearms_on_a_token() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.token(50 * MS)
    assert watchdog.expired(350 * MS) is StallKind.INTER_TOKEN
    watchdog.waive(give_up_ns=5_000 * MS)
    assert watchdog.waived
    assert watchdog.deadline() == 5_050 * MS
    assert watchdog.expired(5_049 * MS) is None
    assert watchdog.expired(5_050 * MS) is StallKind.INTER_TOKEN  # final: not waived twice
    watchdog.token(5_040 * MS)
    assert not watchdog.waived
    assert watchdog.deadline() == 5_340 * MS


def test_a_finished_watchdog_is_not_rearmed_by_a_waiver() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.done()
    watchdog.waive(give_up_ns=5_000 * MS)
    assert watchdog.deadline() is None
    watchdog.token(10 * MS)
    assert watchdog.deadline() is None
