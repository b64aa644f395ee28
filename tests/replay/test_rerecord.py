"""Replaying a run with no injection reproduces its gaps: recorded vs replayed-and-re-recorded.

Tolerance, on a loaded two-core machine: the median of |replayed gap - recorded gap| is at
most 3 ms, nine gaps in ten are within 15 ms, every stream's p99 gap is within 30 ms of the
recorded one, and the recorded 2 s pause comes back within 30 ms. Stamps are taken as reads
complete (as the bench client does), over real loopback sockets. Single gaps can be off by
50-60 ms here: the server's thread and this client share one process and its GIL, so either
one's pause (a collection, the other's burst of work) lands on the wire; that is why the
worst gap of a steady stream is not held to the tolerance.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import numpy as np
import pytest

from steadystream.files import read_timelines
from steadystream.protocol.openai import timeline_from_sse
from steadystream.replay import STREAM_HEADER, ReplayServer
from steadystream.timeline import Timeline
from tests.report.conftest import SAMPLE_RUN

pytestmark = pytest.mark.integration

MS = 1_000_000


async def rerecord(url: str, stream_id: str) -> Timeline:
    async with aiohttp.ClientSession() as session:
        sent = time.perf_counter_ns()
        reads: list[tuple[int, bytes]] = []
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        headers = {STREAM_HEADER: stream_id}
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200
            async for chunk in r.content.iter_any():
                reads.append((time.perf_counter_ns() - sent, chunk))
    return timeline_from_sse(reads, stream_id=stream_id)


def gaps(timeline: Timeline) -> np.ndarray:
    return np.diff(timeline.times[timeline.text_mask])


def test_replay_reproduces_the_recorded_gaps_within_tolerance() -> None:
    run = read_timelines(SAMPLE_RUN).timelines
    chosen = [t for t in run if t.stream_id.endswith("-0")]  # one stream of each shape
    with ReplayServer(run) as server:

        async def all_streams() -> list[Timeline]:
            return await asyncio.gather(*(rerecord(server.url, t.stream_id) for t in chosen))

        replayed = asyncio.run(all_streams())
    errors = []
    for recorded, again in zip(chosen, replayed, strict=True):
        assert again.outcome.value == "complete"
        # same chunking: as many content events, unless reads merged some (never split)
        assert int(again.text_mask.sum()) <= int(recorded.text_mask.sum())
        assert again.text_mask.sum() >= 0.9 * recorded.text_mask.sum()
        p99_error = np.percentile(gaps(again), 99) - np.percentile(gaps(recorded), 99)
        assert abs(p99_error) <= 30 * MS, recorded.stream_id
        if recorded.stream_id.startswith("paused"):
            assert abs(int(gaps(again).max()) - int(gaps(recorded).max())) <= 30 * MS
        if len(gaps(again)) == len(gaps(recorded)):
            errors.append(np.abs(gaps(again) - gaps(recorded)))
    assert errors, "every stream's reads merged events"
    pooled = np.concatenate(errors)
    assert np.median(pooled) <= 3 * MS
    assert np.percentile(pooled, 90) <= 15 * MS
