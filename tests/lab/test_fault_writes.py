"""The faults the writer makes (oversized events, a silent finish, an echoed key), in
simulated time: the lab's response is run against a fake ASGI connection on a FakeClock."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from steadystream.lab import FaultSpec, parse_fault_header
from steadystream.lab.wire import SseFormat
from tests.support.lab import MS, scenario
from tests.support.lab_wire import S, Written
from tests.support.lab_wire import respond as respond_with

STEP_NS = round((10.0 + 0.02) * MS)
QUICK = scenario(
    "steady",
    scheduler={"step_base_ms": 10.0},
    output={"min_tokens": 30, "max_tokens": 30},
)
KEY = "Bearer sk-lab-echo-0123456789"


async def respond(
    faults: str,
    *,
    stream: bool = True,
    include_usage: bool = False,
    authorization: str | None = KEY,
    leave_at_ns: int | None = None,
) -> Written:
    """One chat request with ``X-Lab-Fault: faults``, written on a fake connection."""

    def wire(_: object) -> SseFormat:
        return SseFormat(
            chat=True,
            completion_id="chatcmpl-w-1",
            model="lab",
            created=0,
            include_usage=include_usage,
        )

    return await respond_with(
        QUICK,
        wire,
        faults,
        stream=stream,
        authorization=authorization,
        leave_at_ns=leave_at_ns,
    )


def _data(event: bytes) -> Any:
    payload = event.removeprefix(b"data: ")
    return payload.decode() if payload == b"[DONE]" else orjson.loads(payload)


# -- oversized events -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_oversize_after_writes_one_event_of_exactly_the_asked_size() -> None:
    written = await respond("oversize-after=4:1MiB")
    sizes = [len(event) + 2 for event in written.events()]  # + the blank line that ends it
    big = [size for size in sizes if size > 10_000]
    assert big == [1024 * 1024]
    # The fifth content event (the one after 4 tokens) carries it; the stream then goes on.
    events = written.events()
    index = sizes.index(1024 * 1024)
    assert all("content" in _data(e)["choices"][0]["delta"] for e in events[1:6])
    assert index == 5  # role, 4 content events, then the big one
    assert events[-1] == b"data: [DONE]"
    assert _data(events[-2])["choices"][0]["finish_reason"] == "length"
    # Ground truth: its real size on the wire; the text kept is the token's, not the filler.
    truth = written.truth
    assert max(truth.wire_bytes) == 1024 * 1024
    assert truth.outcome.value == "complete"
    assert all(len(text) < 100 for text in truth.texts)


@pytest.mark.asyncio
async def test_oversize_pads_a_whole_response_too() -> None:
    written = await respond("oversize-after=2:300KB", stream=False)
    body = orjson.loads(written.raw)
    assert written.status == 200
    assert len(body["choices"][0]["message"]["content"]) > 299_000


# -- a finish, then silence ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_silent_finish_holds_usage_and_done_back_for_the_asked_time() -> None:
    written = await respond("silent-finish=20s", include_usage=True)
    finish_at = written.written_at(b'"finish_reason":"length"')
    usage_at = written.written_at(b'"usage"')
    done_at = written.written_at(b"[DONE]")
    assert usage_at - finish_at == 20 * S
    assert done_at == usage_at
    assert written.closed_at == done_at
    # Nothing at all in between: the finish chunk is the last thing before the silence.
    assert [at for at, _ in written.bodies if finish_at < at < usage_at] == []
    truth = written.truth
    usage = [i for i, kind in enumerate(truth.kinds) if kind == 4]
    assert truth.causes[usage[0]][0].value == "injected-fault"
    assert truth.extra_ns[usage[0]] == {"injected-fault": 20 * S}
    assert truth.outcome.value == "complete"
    assert truth.end_ns is not None
    assert truth.end_ns - truth.arrival_ns >= 20 * S


@pytest.mark.asyncio
async def test_silent_finish_without_usage_charges_the_end() -> None:
    written = await respond("silent-finish=3s")
    finish_at = written.written_at(b'"finish_reason":"length"')
    assert written.written_at(b"[DONE]") - finish_at == 3 * S
    truth = written.truth
    assert truth.end_extra_ns == {"injected-fault": 3 * S}
    assert truth.to_json()["end_extra_ns"] == {"injected-fault": 3 * S}
    assert truth.to_timeline().meta["end_extra_ns"] == {"injected-fault": 3 * S}


@pytest.mark.asyncio
async def test_a_client_that_leaves_during_the_silence_ends_the_lab_stream() -> None:
    # 12 tokens at one step each end near 130 ms; the client gives up 5 s later.
    written = await respond("silent-finish=60s", leave_at_ns=5 * S)
    assert b"[DONE]" not in written.raw
    truth = written.truth
    assert truth.done
    assert truth.outcome.value == "cancelled"
    assert truth.end_ns is not None
    assert truth.end_ns - truth.arrival_ns == 5 * S


# -- an upstream that echoes its key --------------------------------------------------------


@pytest.mark.asyncio
async def test_echo_auth_puts_the_key_in_an_error_event() -> None:
    written = await respond("echo-auth=3")
    events = written.events()
    error = _data(events[-2])["error"]
    assert KEY in error["message"]
    assert events[-1] == b"data: [DONE]"
    contents = [e for e in events if b'"content":"' in e and b'"content":""' not in e]
    assert len(contents) == 3
    assert written.truth.outcome.value == "error"
    assert written.truth.tokens_written == 3
    assert KEY not in orjson.dumps(written.truth.to_json()).decode()  # the truth keeps no key


@pytest.mark.asyncio
async def test_echo_auth_malformed_breaks_the_chunk_around_the_key() -> None:
    written = await respond("echo-auth=2:malformed")
    events = written.events()
    broken = events[-2]
    assert KEY.encode() in broken
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(broken.removeprefix(b"data: "))
    assert events[-1] == b"data: [DONE]"


@pytest.mark.asyncio
async def test_echo_auth_in_a_whole_response_and_without_a_header() -> None:
    whole = await respond("echo-auth=1", stream=False)
    assert whole.status == 500
    assert KEY in orjson.loads(whole.raw)["error"]["message"]
    bare = await respond("echo-auth=1", authorization=None)
    assert b"no Authorization header" in bare.raw


# -- the header and the scenario give the same faults ------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("oversize-after=5:4MB", FaultSpec(oversize_after=5, oversize_bytes=4_000_000)),
        ("oversize-after=0:65536", FaultSpec(oversize_after=0, oversize_bytes=65536)),
        ("silent-finish=20s", FaultSpec(silent_finish_ns=20 * S)),
        ("echo-auth=3", FaultSpec(echo_auth_after=3)),
        ("echo-auth=3:malformed", FaultSpec(echo_auth_after=3, echo_auth_form="malformed")),
    ],
)
def test_new_fault_headers(header: str, expected: FaultSpec) -> None:
    parsed = parse_fault_header(header)
    assert parsed == expected
    assert parse_fault_header(parsed.describe()) == parsed
    assert parsed.any


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("oversize-after=5", "N:SIZE"),
        ("oversize-after=5:huge", "oversize-after"),
        ("oversize-after=5:0", "above 0"),
        ("silent-finish=forever", "silent-finish"),
        ("echo-auth=2:loud", "error or malformed"),
        ("echo-auth=2,error-after=3", "cannot be combined"),
        ("echo-auth=2,reset-after=3", "cannot be combined"),
    ],
)
def test_bad_new_fault_headers_are_refused(header: str, expected: str) -> None:
    from steadystream import SpecError

    with pytest.raises(SpecError, match="X-Lab-Fault") as raised:
        parse_fault_header(header)
    assert expected in str(raised.value)


def test_scenario_faults_match_the_header() -> None:
    chosen = scenario(
        "steady",
        faults={
            "echo_auth_after": 4,
            "echo_auth_form": "malformed",
            "oversize_after": 2,
            "oversize_bytes": 2_000_000,
            "silent_finish_ms": 1500,
        },
    )
    assert FaultSpec.from_params(chosen.faults) == parse_fault_header(
        "echo-auth=4:malformed,oversize-after=2:2MB,silent-finish=1.5s"
    )


def test_scenario_refuses_two_endings() -> None:
    from steadystream import ConfigError

    with pytest.raises(ConfigError, match="echo_auth_after"):
        scenario("steady", faults={"error_after": 1, "echo_auth_after": 2})
