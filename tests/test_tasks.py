"""Ending a background task: cancelled and awaited, its crash not swallowed."""

from __future__ import annotations

import asyncio

import pytest

from steadystream._tasks import cancel_and_wait


@pytest.mark.asyncio
async def test_a_task_is_cancelled_and_has_ended() -> None:
    cleaned = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(True)

    task = asyncio.get_running_loop().create_task(forever())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()
    assert cleaned == [True]  # its finally ran before cancel_and_wait returned
    await cancel_and_wait(None)
    await cancel_and_wait(task)  # twice is harmless


@pytest.mark.asyncio
async def test_a_task_that_crashed_says_so() -> None:
    async def crash() -> None:
        raise RuntimeError("broken")

    task = asyncio.get_running_loop().create_task(crash())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="broken"):
        await cancel_and_wait(task)


@pytest.mark.asyncio
async def test_the_callers_own_cancellation_is_not_swallowed() -> None:
    stubborn_started = asyncio.Event()

    async def stubborn() -> None:
        stubborn_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # takes a moment to clean up

    async def owner() -> str:
        task = asyncio.get_running_loop().create_task(stubborn())
        await stubborn_started.wait()
        await cancel_and_wait(task)
        return "went on as if nothing happened"

    outer = asyncio.get_running_loop().create_task(owner())
    await stubborn_started.wait()
    await asyncio.sleep(0)
    outer.cancel()  # the owner is cancelled while it waits for its task to end
    with pytest.raises(asyncio.CancelledError):
        await outer
