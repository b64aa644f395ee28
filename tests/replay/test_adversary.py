"""The replay against hostile input: specs whose numbers overflow, clients that leave early.

Every planned instant must stay a 64-bit count of ns, the ground truth's form: a spec with a
pause of 1e30 s was taken, and its request's ground truth then failed to serialise (a 500
with a traceback). A client that leaves before its body is in must not be a traceback either.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from steadystream._exceptions import InputError, SpecError
from steadystream.cli import _register, app
from steadystream.replay import create_app, parse_injection
from steadystream.replay.inject import MAX_INJECTIONS, Plan, inject
from tests.support.replay import http_scope
from tests.support.report import SAMPLE_RUN
from tests.support.timelines import make_timeline

_register()

DAY_NS = 86_400 * 1_000_000_000


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("pause:1e30s@50%", "longer than the longest duration held"),
        ("stall:25h@start", "longer than a day"),
        ("jitter:1e20ms", "longer than the longest duration held"),
        ("pause:9223372036854775807ns@start", "longer than the longest duration held"),
        ("pause:100000000000ms@start", "longer than a day"),
        ("pause:1s@token=5-99999999999999999999999", "past token 1,000,000,000"),
        ("truncate@token=1000000001", "past token"),
        ("pause:1e309s@50%", "not a finite duration"),
        ("pause:-1s@50%", "cannot read '-1s'"),
        ("jitter:NaNms", "cannot read 'NaNms'"),
        ("pause:1s@101%", "outside 0-100%"),
        ("pause:1s@-5%", "cannot read position '-5%'"),
        ("burst:99999999999@start", "not a token count"),
    ],
)
def test_out_of_range_specs_are_refused_naming_the_part(spec: str, match: str) -> None:
    with pytest.raises(SpecError, match=match) as caught:
        parse_injection(spec)
    assert spec[:20] in str(caught.value)


def test_the_longest_faults_still_plan_in_64_bits() -> None:
    longest = [parse_injection(f"pause:24h@token={i}") for i in range(3)]
    longest += [parse_injection("jitter:24h"), parse_injection("pause:1s@token=1000000000")]
    plan = Plan([0, 10, 20], [1, 1, 1], ["a", "b", "c"], end_ns=20)
    out = inject(plan, longest, np.random.default_rng(0))
    assert max(out.times) < 2**63
    assert out.end_ns < 2**63
    assert out.times[-1] >= 3 * DAY_NS
    assert out.applied[-1]["fired"] is False  # a token past the end never fires


def test_more_injections_than_the_bound_are_refused() -> None:
    timelines = [make_timeline([10.0, 20.0, 30.0], stream_id="rec")]
    many = [parse_injection("pause:1ms@50%")] * (MAX_INJECTIONS + 1)
    with pytest.raises(InputError, match=r"10,001 injections; at most 10,000"):
        create_app(timelines, injections=many)
    create_app(timelines, injections=many[:MAX_INJECTIONS])  # the bound itself is served


async def _left_before_the_body(app: Any, path: str) -> list[dict[str, Any]]:
    """One POST whose client leaves after half its declared body."""
    scope = http_scope(
        "POST", path, [(b"content-type", b"application/json"), (b"content-length", b"100")]
    )
    messages = [
        {"type": "http.request", "body": b'{"model": "m", ', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), 5)
    return sent


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/steadystream/glass"])
def test_a_client_that_leaves_mid_body_is_no_traceback(path: str) -> None:
    app = create_app([make_timeline([10.0, 20.0], stream_id="rec")])
    sent = asyncio.run(_left_before_the_body(app, path))  # old code: ClientDisconnect raised
    assert sent[0]["status"] == 400
    assert app.state.replay.truths.ids() == []  # nothing was played to nobody
    assert list(app.state.replay.glass) == []


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--where", "bogus"], "where: unknown vantage point 'bogus'"),
        (["--seed", "-1"], "seed: -1 is negative"),
        (["--port", "99999"], "--port"),
        (["--stall-limit", "1e400s"], "not a finite duration"),
        (["--inject", "pause:1e30s@50%"], "longer than the longest duration held"),
    ],
)
def test_replay_refuses_bad_options_before_serving(args: list[str], match: str) -> None:
    result = CliRunner().invoke(app, ["replay", str(SAMPLE_RUN), *args])
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    # rich wraps the message in a box: compare without the box and the line breaks
    flat = "".join(result.output.replace("│", "").split())
    assert "".join(match.split()) in flat
