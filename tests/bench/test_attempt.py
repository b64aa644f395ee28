"""One attempt's instants: every time in its timeline counts from the request sent."""

from __future__ import annotations

from steadystream import FakeClock
from steadystream.bench.attempt import AttemptState
from steadystream.stamped.modes import StampMode

DATA = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


def _attempt(clock: FakeClock) -> AttemptState:
    return AttemptState(
        "r-1",
        None,
        None,
        clock=clock,
        stamps=StampMode.KERNEL,
        keep_text=False,
        labels={},
        api="chat",
    )


def test_a_head_stamped_before_the_send_returned_moves_the_sent_instant_back() -> None:
    clock = FakeClock(1_000_000)
    state = _attempt(clock)
    # The send returned, and the clock was read, 40 µs after the kernel had stamped the
    # answer's head: the request was on the wire by then.
    state.wire_ns = 1_500_000
    state.response_headers(1_460_000, 200)
    state.start_recording().feed(1_470_000, DATA)
    state.finish(1_480_000, None, None)
    timeline = state.timeline
    assert timeline is not None
    assert state.sent_ns == 1_460_000
    assert (timeline.header_ns, timeline.first_byte_ns, timeline.end_ns) == (0, 10_000, 20_000)
    assert timeline.times.tolist() == [10_000]


def test_a_head_after_the_send_keeps_the_sent_instant() -> None:
    clock = FakeClock(1_000_000)
    state = _attempt(clock)
    state.wire_ns = 1_500_000
    state.response_headers(1_600_000, 200)
    state.finish(1_700_000, None, None)
    assert state.sent_ns == 1_500_000
    assert state.timeline is not None
    assert state.timeline.header_ns == 100_000
