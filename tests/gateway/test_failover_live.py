"""Watchdog and failover against real labs: stalls, resets, error events, retries, refusals.

The primary lab gets its fault from the upstream's X-Lab-Fault header. Two labs with the same
seed write the same answer to their first request (as long as both requests carry a fault
header, so neither draws the scenario's fault dice), which is what regenerate needs.
"""

from __future__ import annotations

import orjson
import pytest

from steadystream import EventKind, Outcome
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from tests.support.gateway import (
    MemorySink,
    answer,
    chat_body,
    finished_truth,
    gateway_config,
    post,
    upstream,
)

pytestmark = pytest.mark.integration

STALL = "stall-after=8:forever"
NO_FAULT = "slow-first-token=0ms"  # a harmless fault: keeps the lab's random draws aligned


def run(
    sink: MemorySink,
    primary_fault: str,
    *,
    policy: str,
    primary_seed: int = 7,
    fallback_seed: int = 7,
    body: dict[str, object] | None = None,
    path: str = "/chat/completions",
) -> tuple[object, ...]:
    with (
        LabServer("steady", seed=primary_seed) as primary,
        LabServer("steady", seed=fallback_seed) as fallback,
        GatewayServer(
            gateway_config(
                upstream(primary, "primary", fault=primary_fault),
                upstream(fallback, "fallback", fault=NO_FAULT, priority=1),
                failover={"policy": policy},
            ),
            recorder=sink,
        ) as gateway,
    ):
        streamed = post(gateway.base_url, path, body or chat_body(24), {"X-Request-Id": "fo"})
        up, down = sink.edges("fo")
        first = finished_truth(primary, "fo")
        second = fallback.truth("fo.f1")
        if second is not None:
            second = finished_truth(fallback, "fo.f1")
    return streamed, up, down, first, second


def test_stall_then_continue_on_the_fallback_without_repeating_text(sink: MemorySink) -> None:
    streamed, _up, down, first, second = run(sink, STALL, policy="continue", fallback_seed=99)
    assert streamed.status == 200
    assert streamed.done
    assert streamed.error is None
    delivered = "".join(answer(first))
    assert len(answer(first)) == 8
    assert second is not None
    # What the client read: the primary's 8 tokens once, then the fallback's continuation.
    assert streamed.text == delivered + "".join(answer(second))
    assert second.target_tokens == 24 - 8  # the token limit shrank by what was delivered
    assert second.prompt_tokens > first.prompt_tokens  # the delivered text went as a prefix
    assert streamed.roles == 1
    ids = {orjson.loads(data)["id"] for _, data in streamed.events if data != "[DONE]"}
    assert ids == {"chatcmpl-fo"}  # the fallback's chunks carry the first stream's id
    assert first.disconnect_noticed_ns is not None  # the stalled upstream was closed
    assert down.outcome is Outcome.FAILED_OVER
    (entry,) = down.meta["failovers"]
    assert entry["cause"] == "stall"
    assert (entry["from"], entry["to"], entry["kind"], entry["result"]) == (
        "primary", "fallback", "continue", "completed"
    )  # fmt: skip
    assert entry["after_tokens"] == 8
    labels = [label for label in down.annotations["failover"] if label]
    assert labels == ["stall:continue:fallback"]


def test_regenerate_with_a_matching_answer_relays_only_the_rest(sink: MemorySink) -> None:
    streamed, _, down, first, second = run(sink, STALL, policy="regenerate")
    assert second is not None
    assert "".join(answer(second)).startswith("".join(answer(first)))
    assert streamed.text == "".join(answer(second))  # every token exactly once
    assert streamed.error is None
    assert streamed.done
    assert down.outcome is Outcome.FAILED_OVER
    assert down.meta["failovers"][0]["result"] == "completed"


def test_regenerate_that_diverges_ends_with_an_in_band_error(sink: MemorySink) -> None:
    streamed, _, down, first, second = run(sink, STALL, policy="regenerate", fallback_seed=8)
    assert second is not None
    assert not "".join(answer(second)).startswith("".join(answer(first)))
    assert streamed.text == "".join(answer(first))  # nothing that contradicts what was read
    assert streamed.error is not None
    assert "different answer" in streamed.error
    assert streamed.done
    assert down.outcome is Outcome.ERROR
    assert down.meta["failovers"][0]["result"] == "diverged"


def test_policy_off_ends_a_stall_with_an_in_band_error(sink: MemorySink) -> None:
    streamed, _, down, first, second = run(sink, STALL, policy="off")
    assert second is None  # no fallback was asked
    assert streamed.text == "".join(answer(first))
    assert streamed.error is not None
    assert "stall" in streamed.error
    assert streamed.done
    assert down.outcome is Outcome.ERROR
    assert down.kinds[-1] == EventKind.ERROR


@pytest.mark.parametrize(
    ("fault", "cause"), [("reset-after=5", "reset"), ("error-after=5", "upstream-error")]
)
def test_mid_stream_reset_or_error_event_is_an_in_band_error(
    sink: MemorySink, fault: str, cause: str
) -> None:
    streamed, _up, down, first, _ = run(sink, fault, policy="off")
    assert streamed.status == 200
    assert streamed.text == "".join(answer(first)[:5])
    assert streamed.error is not None
    assert cause in streamed.error
    assert streamed.done  # never silently truncated
    assert down.outcome is Outcome.ERROR
    assert down.meta["failovers"][0]["cause"] == cause


def test_an_error_event_with_continue_completes_on_the_fallback(sink: MemorySink) -> None:
    streamed, _, down, first, second = run(
        sink, "error-after=5", policy="continue", fallback_seed=5
    )
    assert second is not None
    assert streamed.error is None
    assert streamed.text == "".join(answer(first)[:5]) + "".join(answer(second))
    assert down.outcome is Outcome.FAILED_OVER


def test_completions_continue_from_prompt_plus_delivered_text(sink: MemorySink) -> None:
    body = {"model": "lab", "prompt": "Begin:", "stream": True, "max_tokens": 20}
    streamed, _, _, first, second = run(
        sink, STALL, policy="continue", fallback_seed=3, body=body, path="/completions"
    )
    assert second is not None
    assert streamed.text == "".join(answer(first)) + "".join(answer(second))
    assert second.prompt_tokens > first.prompt_tokens


def test_before_the_first_token_the_retry_is_transparent(sink: MemorySink) -> None:
    streamed, _, down, first, second = run(sink, "slow-first-token=5s", policy="off")
    # Even with mid-stream failover off, nothing was promised yet: the next upstream serves.
    assert second is not None
    assert streamed.error is None
    assert streamed.done
    assert streamed.text == "".join(answer(second))
    assert streamed.roles == 1
    assert first.tokens_written == 0
    assert first.disconnect_noticed_ns is not None
    (entry,) = down.meta["failovers"]
    assert (entry["cause"], entry["kind"], entry["result"]) == (
        "first-token-timeout", "retry", "completed"
    )  # fmt: skip


def test_upstream_errors_before_the_first_token_pass_through() -> None:
    with LabServer("steady") as lab, GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        refused = post(gw.base_url, "/chat/completions", chat_body(5, n=2))
    assert refused.status == 400  # the lab serves n = 1 only; a fallback would not help
    error = refused.json()["error"]
    assert "n = 1" in error["message"]
    assert error["code"] == "upstream_400"


def test_an_unreachable_upstream_is_skipped_then_reported(sink: MemorySink) -> None:
    dead = {"name": "dead", "base_url": "http://127.0.0.1:9/v1"}
    with LabServer("steady") as lab:
        config = gateway_config(dead, upstream(lab, "lab", priority=1))
        with GatewayServer(config, recorder=sink) as gateway:
            served = post(
                gateway.base_url, "/chat/completions", chat_body(3), {"X-Request-Id": "u"}
            )
            _, down = sink.edges("u")
        with GatewayServer(gateway_config(dead)) as only_dead:
            failed = post(only_dead.base_url, "/chat/completions", chat_body(3))
    assert served.status == 200
    assert served.done
    assert served.error is None
    assert down.meta["failovers"][0]["cause"] == "connect"
    assert failed.status == 502
    assert "dead" in failed.json()["error"]["message"]


def test_each_upstream_is_tried_once(sink: MemorySink) -> None:
    dead = {"name": "dead", "base_url": "http://127.0.0.1:9/v1"}
    with LabServer("steady") as lab:
        config = gateway_config(
            dead, upstream(lab, "slow", fault="slow-first-token=5s", priority=1)
        )
        with GatewayServer(config, recorder=sink) as gateway:
            streamed = post(
                gateway.base_url, "/chat/completions", chat_body(3), {"X-Request-Id": "o"}
            )
            _, down = sink.edges("o")
    assert streamed.status == 200
    assert streamed.error is not None
    assert "no upstream left" in streamed.error
    assert [a["upstream"] for a in down.meta["attempts"]] == ["dead", "slow"]


def test_usage_after_a_continuation_is_the_delivered_answer_and_billing_is_kept(
    sink: MemorySink,
) -> None:
    body = chat_body(24, stream_options={"include_usage": True})
    streamed, _, down, first, second = run(
        sink, STALL, policy="continue", fallback_seed=99, body=body
    )
    assert second is not None
    usages = [orjson.loads(data)["usage"] for _, data in streamed.events if '"usage"' in data]
    sent = usages[-1]
    delivered = len(answer(first)) + len(answer(second))  # one token per lab content chunk
    assert sent["completion_tokens"] == delivered == 24
    assert sent["prompt_tokens"] == second.prompt_tokens - 8
    assert sent["total_tokens"] == sent["prompt_tokens"] + sent["completion_tokens"]
    billed = down.meta["usage"]["billed"]
    assert [b["upstream"] for b in billed] == ["primary", "fallback"]
    assert billed[1]["prompt_tokens"] == second.prompt_tokens  # as the fallback reported it
    assert billed[1]["completion_tokens"] == len(answer(second))
    assert down.meta["usage"]["delivered"] == sent
