"""With no upstream to fail over to, a mid-stream stall is waited out, not made a cut answer."""

from __future__ import annotations

import pytest

from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, get, post, upstream

pytestmark = pytest.mark.integration


def _stalls_counted(metrics: bytes) -> float:
    return sum(
        float(line.rsplit(b" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(b"steadystream_stalls_total{")
    )


def test_a_stall_with_no_fallback_is_waited_out_and_counted(sink: MemorySink) -> None:
    # A 2 s pause against the test-sized 1 s stall timeout: a second either side, so the
    # pause is always the one stall counted and a busy machine's pause of a healthy token
    # is never a second one.
    with (
        LabServer("steady", seed=4) as lab,
        GatewayServer(
            gateway_config(upstream(lab, "only", fault="stall-after=3:2s")), recorder=sink
        ) as gateway,
    ):
        streamed = post(gateway.base_url, "/chat/completions", chat_body(8), {"X-Request-Id": "w"})
        _, down = sink.edges("w")
        _, metrics = get(gateway.url, "/metrics")
    assert streamed.status == 200
    assert streamed.done
    assert streamed.error is None
    assert int(down.text_mask.sum()) == 8  # every token arrived, one event each
    assert "failovers" not in down.meta or not down.meta["failovers"]
    gaps = (down.times[down.text_mask][1:] - down.times[down.text_mask][:-1]) / 1e9
    assert gaps.max() >= 1.9  # the 2 s pause reached the client, as it was
    assert _stalls_counted(metrics) == 1


def test_without_the_wait_a_stall_with_no_fallback_ends_in_band(sink: MemorySink) -> None:
    with (
        LabServer("steady", seed=4) as lab,
        GatewayServer(
            gateway_config(
                upstream(lab, "only", fault="stall-after=3:1s"),
                failover={"wait_without_fallback": False},
                # Well under the 1 s pause, so it is always caught (a busy machine's pause
                # of a healthy token past it would end the stream the same way).
                watchdog={"stall_timeout": "300ms"},
            ),
            recorder=sink,
        ) as gateway,
    ):
        streamed = post(gateway.base_url, "/chat/completions", chat_body(8))
    assert streamed.status == 200
    assert streamed.done
    assert streamed.error is not None
    assert "no fallback" in streamed.error or "no upstream left" in streamed.error


def test_a_stall_waited_out_gives_up_at_its_bound(sink: MemorySink) -> None:
    with (
        LabServer("steady", seed=4) as lab,
        GatewayServer(
            gateway_config(
                upstream(lab, "only", fault="stall-after=3:forever"),
                # A healthy token paused past the stall is waited out too, up to the bound.
                watchdog={"stall_timeout": "300ms", "give_up_timeout": "800ms"},
            ),
            recorder=sink,
        ) as gateway,
    ):
        streamed = post(gateway.base_url, "/chat/completions", chat_body(8), {"X-Request-Id": "g"})
        _, down = sink.edges("g")
    assert streamed.status == 200
    assert streamed.done
    assert streamed.error is not None
    assert int(down.text_mask.sum()) == 3
    assert "waited out with no fallback" in streamed.error
    # ended by the give-up bound (800 ms after the last token), not by the 300 ms stall
    assert (down.end_ns - down.times[down.text_mask][-1]) / 1e9 >= 0.75
