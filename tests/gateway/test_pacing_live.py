"""Pacing through the gateway, per tenant and per request: text unchanged, both edges measured."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest

from steadystream import Timeline
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import (
    MS,
    MemorySink,
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    post,
    upstream,
)

pytestmark = pytest.mark.integration

KEYS = {"CALM_KEY": "gw-calm", "RAW_KEY": "gw-raw"}
# One token every 90 ms; the bucket is large enough that nothing overflows, and the tail
# long enough that the end drains at the same pace.
CALM = "leaky:interval=90ms,capacity=100,tail=5s"


@pytest.fixture(scope="module")
def paced() -> Iterator[tuple[LabServer, GatewayServer, MemorySink]]:
    sink = MemorySink()
    with LabServer("steady") as lab:
        config = gateway_config(
            upstream(lab, "lab"),
            tenants=[
                {"name": "calm", "api_key_env": ["CALM_KEY"], "pacer": CALM},
                {"name": "raw", "api_key_env": ["RAW_KEY"]},
            ],
        )
        with GatewayServer(config, env=KEYS, recorder=sink) as gateway:
            yield lab, gateway, sink


_RUNS = itertools.count()


def text_gaps_ms(timeline: Timeline) -> np.ndarray:
    return np.diff(timeline.times[timeline.text_mask]) / MS


def run(
    paced: tuple[LabServer, GatewayServer, MemorySink], key: str, request_id: str, **headers: str
) -> tuple[str, str, Timeline, Timeline]:
    lab, gateway, sink = paced
    request_id = f"{request_id}-{next(_RUNS)}"  # the lab is the module's: each run its own id
    streamed = post(
        gateway.base_url,
        "/chat/completions",
        chat_body(8),
        {"Authorization": f"Bearer {key}", "X-Request-Id": request_id, **headers},
    )
    assert streamed.status == 200
    assert streamed.done
    assert streamed.error is None
    up, down = sink.edges(request_id)
    return streamed.text, "".join(answer(finished_truth(lab, request_id))), up, down


def test_a_tenants_pacer_spaces_the_tokens_out(
    paced: tuple[LabServer, GatewayServer, MemorySink],
) -> None:
    text, truth, up, down = run(paced, "gw-calm", "calm-1")
    assert text == truth  # pacing moves tokens in time, never changes them
    assert np.median(text_gaps_ms(up)) < 45  # the lab's 25 ms cadence, at the upstream edge
    gaps = text_gaps_ms(down)  # the pacer's 90 ms, at the client edge
    assert np.median(gaps) >= 85
    # No two tokens let out together. Each is stamped when its send returned: a send that a
    # busy machine held up stamps late and shortens the gap after it by as much (the next
    # release is timed from the pacer's, not from the stamp), so half an interval, not 60 ms.
    assert gaps.min() >= 45
    assert down.meta["pacer"].startswith("<Leaky")
    assert (down.times[down.text_mask][-1]) > up.times[up.text_mask][-1]


def test_a_request_chooses_its_own_pacer(
    paced: tuple[LabServer, GatewayServer, MemorySink],
) -> None:
    text, truth, _, down = run(
        paced,
        "gw-raw",
        "raw-paced",
        **{"X-Steadystream-Pacer": "leaky:interval=60ms,capacity=100,tail=5s"},
    )
    assert text == truth
    assert np.median(text_gaps_ms(down)) >= 55


def test_no_pacer_relays_at_the_upstreams_pace(
    paced: tuple[LabServer, GatewayServer, MemorySink],
) -> None:
    text, truth, up, down = run(paced, "gw-raw", "raw-1")
    assert text == truth
    assert down.meta["pacer"] is None
    # Relayed as it came: each event leaves within a few ms of its arrival.
    added = (down.times - up.times)[down.text_mask] / MS
    assert np.median(added) < 5
    # A tenant's pacer can be turned off per request.
    text, _, _, calm_off = run(
        paced, "gw-calm", "calm-off", **{"X-Steadystream-Pacer": "passthrough"}
    )
    assert np.median(text_gaps_ms(calm_off)) < 45
