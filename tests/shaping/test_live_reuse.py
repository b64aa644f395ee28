"""One pacer paces one stream: the live driver refuses a pacer that already paced one
(closed, it would drop every event of the next), and takes ``pacer.fresh()``."""

from __future__ import annotations

import pytest

from steadystream import Event
from steadystream.shaping import parse_spec
from tests.support.shaping import MS, run_live

EVENTS = [Event(i * 100 * MS, "ab", 1) for i in range(5)]


@pytest.mark.asyncio
async def test_pace_refuses_a_pacer_that_already_paced_a_stream() -> None:
    pacer = parse_spec("leaky:interval=33ms")
    first = await run_live(EVENTS, pacer)
    assert [e.text for e in first] == ["ab"] * 5
    assert pacer.used
    with pytest.raises(ValueError, match=r"^pacer leaky:interval=33ms has already paced"):
        await run_live(EVENTS, pacer)


@pytest.mark.asyncio
async def test_pace_refuses_a_pacer_holding_tokens_pushed_elsewhere() -> None:
    pacer = parse_spec("leaky:interval=33ms")
    pacer.push(0, Event(0, "ab", 1))
    assert not pacer.closed
    assert pacer.used
    with pytest.raises(ValueError, match="already paced a stream"):
        await run_live(EVENTS, pacer)


@pytest.mark.asyncio
async def test_pace_takes_a_fresh_copy_of_a_used_pacer() -> None:
    pacer = parse_spec("leaky:interval=33ms")
    await run_live(EVENTS, pacer)
    again = await run_live(EVENTS, pacer.fresh())
    assert [e.text for e in again] == ["ab"] * 5


def test_a_new_pacer_is_unused() -> None:
    assert not parse_spec("adaptive").used
