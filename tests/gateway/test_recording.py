"""Both-edge logs as timelines, and rotating JSONL files."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from steadystream import EventKind, Outcome, TokenSource, Where
from steadystream.files import read_timelines
from steadystream.gateway.events import Piece
from steadystream.gateway.recording import StreamRecord, TimelineRecorder

MS = 1_000_000


def piece(kind: EventKind | None, text: str = "", usage: int = -1) -> Piece:
    return Piece(kind, text, b"data: x\n\n", 9, usage)


def test_both_edges_share_the_origin_and_the_request_id() -> None:
    record = StreamRecord("req-1", received_ns=1_000 * MS, labels={"model": "m", "route": "chat"})
    events = [piece(EventKind.ROLE), piece(EventKind.CONTENT, "Hi"), piece(EventKind.CONTENT, "!")]
    for offset, p in zip((1_010, 1_010, 1_035), events, strict=True):
        record.upstream.add(offset * MS - record.received_ns, p)
        record.downstream.add((offset + 2) * MS - record.received_ns, p)
    record.upstream.add(40 * MS, piece(None))  # [DONE]: the end marker, not an event
    record.attempts.append({"upstream": "lab"})
    up, down = record.timelines(1_050 * MS, keep_text=False)
    assert (up.where, down.where) == (Where.GATEWAY_UPSTREAM, Where.GATEWAY_DOWNSTREAM)
    assert up.stream_id == down.stream_id == "req-1"
    assert list(up.times) == [10 * MS, 10 * MS, 35 * MS]
    assert list(down.times - up.times) == [2 * MS] * 3  # the gateway's own contribution
    assert up.end_ns == 50 * MS
    assert up.texts is None  # no text unless configured
    assert up.total_tokens == 2
    assert up.meta["attempts"] == [{"upstream": "lab"}]


def _relayed_events() -> list[Piece]:
    return [
        piece(EventKind.ROLE),
        piece(EventKind.CONTENT, "Hello there"),
        piece(EventKind.CONTENT, "ünïcode"),
        Piece(EventKind.CONTENT, "kept", b"", 40),  # its raw bytes not kept: its wire counts
        piece(None),  # [DONE]: no event on either edge
    ]


@pytest.mark.parametrize("differ", ["none", "keepalive", "text", "usage"])
def test_the_downstream_counts_tokens_once_only_when_its_events_are_the_upstreams(
    differ: str,
) -> None:
    events = _relayed_events()
    record = StreamRecord("r", 0, {})
    for p in events:
        record.upstream.add(1 * MS, p)
        record.downstream.add(2 * MS, p)
    if differ == "keepalive":  # the gateway's own event, at the client's edge only
        record.downstream.add(3 * MS, piece(EventKind.KEEPALIVE))
    elif differ == "text":  # a fallback's rewritten text
        record.downstream.add(3 * MS, piece(EventKind.CONTENT, "a much longer piece of text"))
        record.upstream.add(3 * MS, piece(EventKind.CONTENT, "short"))
    elif differ == "usage":
        record.downstream.add(3 * MS, piece(EventKind.CONTENT, "x", usage=9))
        record.upstream.add(3 * MS, piece(EventKind.CONTENT, "x"))
    assert record.downstream.same_events(record.upstream) is (differ == "none")
    up, down = record.timelines(4 * MS, keep_text=False)
    # Whether taken from the upstream or counted again, the counts are the downstream's own.
    alone = StreamRecord("r", 0, {})
    alone.upstream = record.downstream
    own, _ = alone.timelines(4 * MS, keep_text=False)
    assert list(down.tokens) == list(own.tokens)
    assert down.token_source is own.token_source
    if differ == "none":
        assert list(down.tokens) == list(up.tokens)
        assert down.tokens is not up.tokens  # a copy: neither timeline changes the other's


def test_running_usage_gives_exact_tokens_with_one_attempt() -> None:
    record = StreamRecord("r", 0, {})
    record.attempts.append({})
    record.upstream.add(1, piece(EventKind.CONTENT, "ab", usage=2))
    record.upstream.add(2, piece(EventKind.CONTENT, "c", usage=3))
    up, _ = record.timelines(3, keep_text=True)
    assert up.token_source is TokenSource.EXACT
    assert list(up.tokens) == [2, 1]
    assert up.texts == ["ab", "c"]


def test_a_failover_is_annotated_on_the_gap_it_ends() -> None:
    record = StreamRecord("r", 0, {})
    record.downstream.add(1, piece(EventKind.CONTENT, "a"))
    record.downstream.mark_next("stall:continue:b")
    record.downstream.add(9, piece(EventKind.CONTENT, "b"))
    record.outcome = Outcome.FAILED_OVER
    _, down = record.timelines(10, keep_text=False)
    assert down.annotations["failover"] == [None, "stall:continue:b"]
    assert down.outcome is Outcome.FAILED_OVER


def test_files_rotate_and_old_ones_go(tmp_path: Path) -> None:
    recorder = TimelineRecorder(tmp_path, rotate_streams=2, keep_files=2)
    for i in range(5):
        record = StreamRecord(f"r{i}", 0, {"route": "chat"})
        record.downstream.add(1, piece(EventKind.CONTENT, "secret answer"))
        recorder.write(record.timelines(2, keep_text=False))
    recorder.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2  # 3 were written, the oldest deleted
    assert files == sorted(recorder.files)
    loaded = [t for f in files for t in read_timelines(f).timelines]
    assert sorted({t.stream_id for t in loaded}) == ["r2", "r3", "r4"]
    assert all(t.texts is None for t in loaded)
    assert not any(b"secret answer" in f.read_bytes() for f in files)
    downstream = [t for t in loaded if t.where is Where.GATEWAY_DOWNSTREAM]
    assert all(np.array_equal(t.times, [1]) for t in downstream)


def test_files_of_ended_gateway_processes_count_against_the_limit(tmp_path: Path) -> None:
    old = time.time() - 3600

    def left(stamp: str, *, stale: bool = True) -> Path:
        path = tmp_path / f"gateway-{stamp}-1-0001.jsonl"  # a pid 1: ids say nothing
        path.write_bytes(b"")
        if stale:
            os.utime(path, (old, old))
        return path

    gone = [left(f"2026010{day}T000000") for day in range(1, 6)]
    quiet = left("20260106T000000", stale=False)  # written lately: kept
    held = left("20260101T000001")  # another gateway (another host, say) still writes it
    other = tmp_path / "notes.jsonl"  # not a gateway's file
    other.write_bytes(b"")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            "f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True)\n"
            "time.sleep(60)",
            str(held),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        recorder = TimelineRecorder(tmp_path, keep_files=3)
        record = StreamRecord("r0", 0, {"route": "chat"})
        record.downstream.add(1, piece(EventKind.CONTENT, "a"))
        recorder.write(record.timelines(2, keep_text=False))
        # Its own file is held while it writes (no other gateway's pruner takes it).
        (mine,) = recorder.files
        with pytest.raises(BlockingIOError), mine.open() as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        recorder.close()
        with mine.open() as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go once it closed
    finally:
        holder.kill()
        holder.communicate()  # reaped, and its pipe closed
    # Its own file and the newest two of the ended ones: three; the rest are gone.
    assert [p.exists() for p in gone] == [False, False, False, True, True]
    assert quiet.exists()
    assert held.exists()
    assert other.exists()
