"""The garbage collector tuned for steadystream's own processes (never for a host's)."""

from __future__ import annotations

import gc

__all__ = ["quiet_gc"]


def quiet_gc() -> None:
    """Tune this process's garbage collector for a server or a load generator (its own only).

    With hundreds of open streams the collector scans well over 100,000 live objects
    (coroutines, tasks, buffers, timeline arrays), and its full passes stall the event loop
    for tens to hundreds of milliseconds: every other stream waits (the gateway's added p99
    at 2,000 short streams was 120-150 ms with Python's settings, 7-9 ms with these), and a
    load generator's events wait together in the kernel and share a stamp
    (docs/performance.md). What is loaded at startup lives as long as the process and is
    frozen out of the scans; young collections run every 10,000 allocations instead of 700
    (about a millisecond each), and full ones rarely.

    That is safe only because a stream leaves no reference cycle: reference counting frees
    it, whichever way it ends (tests/gateway/test_garbage.py); cyclic garbage would otherwise
    wait for a full collection and memory would climb (a soak showed it).
    """
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)
