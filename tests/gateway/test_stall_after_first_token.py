"""A stall right after the first token is caught at the stall timeout, not the first-token one.

After the first token the watchdog's deadline moves sooner (from the first-token timeout to
the stall timeout); the guard sleeping until the old deadline found the stall late (up to the
stuck-client check interval, 7.5 s by default). Found by the llama.cpp failover test.
"""

from __future__ import annotations

import pytest

from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import MemorySink, chat_body, gateway_config, post, upstream

pytestmark = pytest.mark.integration

MS = 1_000_000


def test_the_stall_is_caught_at_its_own_timeout(sink: MemorySink) -> None:
    with (
        LabServer("steady", seed=7) as primary,
        LabServer("steady", seed=7) as fallback,
        GatewayServer(
            gateway_config(
                # Stalled right after its first token: before it, only the 30 s first-token
                # timeout runs, so a busy machine's pause cannot fail it over sooner.
                upstream(primary, "primary", fault="stall-after=1:forever"),
                # Only the primary's stall is under test: a pause of the fallback is none.
                upstream(
                    fallback,
                    "fallback",
                    fault="slow-first-token=0ms",
                    priority=1,
                    timeouts={"first_token": "60s", "stall": "60s"},
                ),
                watchdog={"first_token_timeout": "30s", "stall_timeout": "300ms"},
                failover={"policy": "continue"},
            ),
            recorder=sink,
        ) as gateway,
    ):
        streamed = post(gateway.base_url, "/chat/completions", chat_body(12), {"X-Request-Id": "s"})
        up, down = sink.edges("s")
    assert streamed.done
    assert streamed.error is None
    (entry,) = down.meta["failovers"]
    assert entry["cause"] == "stall"
    # The failover came a stall timeout after the first token reached the gateway (plus a
    # timer's slack, up to a busy machine's pause: not the 30 s first-token deadline, nor
    # the 7.5 s stuck-client check). The deadline runs from the token's arrival at the
    # upstream edge (a kernel stamp where there is one), which precedes its hand-off
    # downstream.
    arrived = up.times[up.text_mask]
    assert 300 * MS <= entry["at_ns"] - arrived[0] < 1_800 * MS
