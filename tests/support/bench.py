"""What the bench tests share: a lab in its own process, short runs against a lab, runs by hand
(steady, or with one freeze per stream) and a port where nothing listens."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from steadystream import Timeline
from steadystream._processes import Child, free_port, steadystream_command
from steadystream.bench import (
    Bench,
    ClosedLoop,
    Endpoint,
    RunOptions,
    RunResult,
    Schedule,
    Workload,
)
from steadystream.bench.workload import builtin_prompts
from steadystream.files import JsonlWriter
from tests.support.timelines import make_timeline


@dataclass(frozen=True)
class LabProcess:
    url: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


@contextlib.contextmanager
def lab_in_a_process(scenario: str = "steady") -> Iterator[LabProcess]:
    """The lab in its own process, as in production: it shares no GIL with the client."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = steadystream_command("lab", "--port", str(port), "--scenario", scenario)
    with Child("the lab process", command, health_url=f"{url}/healthz"):
        yield LabProcess(url)


async def small_run(
    base_url: str,
    *,
    concurrency: int = 2,
    requests: int = 4,
    max_tokens: int = 20,
    options: RunOptions | None = None,
    output: Path | None = None,
    warmup: int = 0,
    headers: tuple[tuple[str, str], ...] = (),
    schedule: Schedule | None = None,
    api: str = "chat",
) -> RunResult:
    """A short run of the built-in prompts (closed loop unless a schedule is given), through
    ``api`` (chat, completions, responses, messages)."""
    endpoint = Endpoint(base_url, "lab", kind=api, headers=headers)
    workload = Workload(builtin_prompts(), max_tokens=max_tokens)
    writer = JsonlWriter(output) if output is not None else None
    try:
        async with Bench(endpoint, workload) as bench:
            if warmup:
                await bench.warm_up(warmup)
            return await bench.run(
                schedule or ClosedLoop(concurrency),
                options or RunOptions(max_requests=requests),
                sink=writer.write if writer is not None else None,
            )
    finally:
        if writer is not None:
            writer.close()


def steady_run(n: int = 10, gap_ms: float = 20.0) -> list[Timeline]:
    return [
        make_timeline([100 + gap_ms * i for i in range(50)], stream_id=f"s{k}") for k in range(n)
    ]


def frozen_run(n: int = 10) -> list[Timeline]:
    # Each stream freezes for 600 ms once, mid-answer: worst gap and goodput break.
    times = [100 + 20.0 * i for i in range(25)] + [700 + 20.0 * i for i in range(25, 50)]
    return [make_timeline(times, stream_id=f"f{k}") for k in range(n)]


def closed_port() -> int:
    return free_port()  # closed again once found: nothing listens there


def id_event(event_id: int | bytes, text: str) -> bytes:
    """A chat chunk of ``text`` as an SSE event with ``id: event_id`` (a resumable stream's)."""
    ident = event_id if isinstance(event_id, bytes) else b"%d" % event_id
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "lab"}
    chunk["choices"] = [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
    return b"id: %s\ndata: %s\n\n" % (ident, orjson.dumps(chunk))
