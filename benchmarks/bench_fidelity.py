"""How faithfully the bench client measures: its gaps against the sender's true write times.

    python benchmarks/bench_fidelity.py --streams 100,500,1000 [--tokens 200] [--ramp 5s]
        [--sender raw|lab] [--stamps kernel,user]
    python benchmarks/bench_fidelity.py --streams 100 --sender lab --peer-aiperf /path/to/aiperf
    (`make peers` installs AIPerf 0.13.0 in ~/.cache/steadystream/peers/aiperf-0.13.0)

For each load and each stamp mode a fresh sender runs in its own process with a steady 50 ms
cadence (20 events a second per stream, one token per event, every stream's event written on
the same tick) and records each write's time. ``--sender raw`` (the default) is
``_raw_sender.py``, whose writes are plain blocking sends stamped as they return; ``--sender
lab`` is the lab (``lab --record``), whose write stamps are taken after its ASGI send returns
and can be late by milliseconds on a busy machine. The bench client runs here, on uvloop: a
closed loop of N streams whose slots open over the ramp, one request each, every stream
``--tokens`` long. Each client gap between consecutive content events is paired with the
sender's gap between the same two writes (same request id, same event index); the error is
their absolute difference (and, beside it, how far the client's gap falls outside the range
the sender's send-call windows allow: a sender descheduled around its own send). The stamp
modes run one after the other at each load, so their figures sit side by side from the same
minutes of the same machine.

Printed per load: p50, p99 and max of the error, the share of streams the client flagged
(loop lag over 5 ms while open), the client's loop lag, and the first load where the p99
error passes 2 ms ("degrades at"), and the client's CPU per event. With ``--peer-aiperf``
(lab sender only) the same lab scenario is loaded by
AIPerf (installed in its own environment) at the same concurrency; its export is read by the
importer (``steadystream.files.peers``: one timeline per request, named by the request's
``X-Request-ID``, its gaps AIPerf's ``inter_chunk_latency`` list), so its gaps are paired
with the lab's ground truth exactly as ours are, and the same error figures are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from steadystream._gc import quiet_gc
from steadystream._processes import Child, free_port, steadystream_command
from steadystream._units import parse_duration
from steadystream.bench import (
    Bench,
    ClosedLoop,
    Endpoint,
    RunOptions,
    Workload,
    builtin_prompts,
    loop,
)
from steadystream.files import read_jsonl, read_timelines
from steadystream.metrics import fleet_metrics

MS = 1_000_000
DEGRADED_P99_MS = 2.0
CADENCE_MS = 50.0  # 20 events a second per stream

SCENARIO = """\
preset: steady
name: fidelity
description: a steady 50 ms cadence at any batch size, for measuring the measurer
scheduler:
  step_base_ms: {cadence}
  step_per_seq_ms: 0.0
  prefill_per_token_ms: 0.0
  max_running: 4096
output:
  min_tokens: {tokens}
  max_tokens: {tokens}
server:
  keep_requests: 50000
"""


@dataclass
class Level:
    streams: int
    stamps: str
    sender: str
    paired_gaps: int
    error_p50_ms: float
    error_p99_ms: float
    error_max_ms: float
    beyond_send_p99_ms: float  # the error beyond the sender's own send-call window
    beyond_send_max_ms: float
    flagged_share: float
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    schedule_lag_p99_ms: float | None
    true_gap_p50_ms: float
    true_gap_p99_ms: float
    client_gap_p50_ms: float
    client_gap_p99_ms: float
    client_cpu_s: float
    client_cpu_us_per_event: float
    stamps_shared: int
    elapsed_s: float


@contextlib.contextmanager
def lab_process(scenario: Path, record: Path) -> Iterator[str]:
    """The lab in its own process; yields its origin URL and stops it on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = steadystream_command(
        "lab", "--scenario", str(scenario), "--port", str(port), "--record", str(record)
    )
    with Child("the lab", command, health_url=f"{url}/healthz", start_timeout_s=60):
        yield url


@contextlib.contextmanager
def raw_sender(tokens: int, record: Path) -> Iterator[str]:
    """``_raw_sender.py`` in its own process; yields its origin URL and stops it on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(Path(__file__).with_name("_raw_sender.py")), "--port"]
    command += [str(port), "--tokens", str(tokens), "--cadence-ms", str(CADENCE_MS)]
    command += ["--record", str(record)]
    with Child("the raw sender", command, health_url=f"{url}/healthz", start_timeout_s=30):
        yield url


def true_writes(sender: str, record: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each request id's content-event writes: when each send began and when it returned.

    The lab records one instant per write (after its send returned), given as both.
    """
    if sender == "lab":
        return {
            t.stream_id: (t.times[t.text_mask], t.times[t.text_mask])
            for t in read_jsonl(record).timelines
        }
    writes = {}
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        written = np.asarray(entry["written_ns"], dtype=np.int64)
        writes[entry["request_id"]] = (np.asarray(entry["started_ns"], dtype=np.int64), written)
    return writes


async def bench_level(base_url: str, streams: int, tokens: int, ramp_ns: int, stamps: str):  # type: ignore[no-untyped-def]
    endpoint = Endpoint(base_url, "lab", ignore_eos=True, usage="on")
    workload = Workload(builtin_prompts(), max_tokens=tokens)
    async with Bench(endpoint, workload, read_timeout_s=300, stamps=stamps) as bench:
        await bench.warm_up(1)
        return await bench.run(
            ClosedLoop(streams, ramp_ns=ramp_ns), RunOptions(max_requests=streams)
        )


def measure(
    streams: int, tokens: int, ramp_ns: int, workdir: Path, *, sender: str, stamps: str
) -> Level:
    record = workdir / f"truth-{sender}-{stamps}-{streams}.jsonl"
    record.unlink(missing_ok=True)
    if sender == "lab":
        scenario = workdir / "fidelity.yaml"
        scenario.write_text(SCENARIO.format(cadence=CADENCE_MS, tokens=tokens))
        serving = lab_process(scenario, record)
    else:
        serving = raw_sender(tokens, record)
    with serving as url:
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        result = loop.run(bench_level(f"{url}/v1", streams, tokens, ramp_ns, stamps))
        elapsed = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(0.5)  # the sender records each request once it has written its end
    truth = true_writes(sender, record)
    errors, beyond, true_gaps, client_gaps = [], [], [], []
    events = 0
    for timeline in result.timelines:
        events += len(timeline)
        writes = truth.get(timeline.stream_id)
        if writes is None:
            continue
        started, written = writes
        seen = timeline.times[timeline.text_mask]
        n = min(len(seen), len(written))
        theirs, ours = np.diff(written[:n]), np.diff(seen[:n])
        errors.append(np.abs(ours - theirs))
        # The true gap lies between the shortest and longest the send windows allow.
        shortest = started[1:n] - written[: n - 1]
        longest = written[1:n] - started[: n - 1]
        beyond.append(np.maximum(0, np.maximum(shortest - ours, ours - longest)))
        true_gaps.append(theirs)
        client_gaps.append(ours)
    error = np.concatenate(errors) / MS
    outside = np.concatenate(beyond) / MS
    true_all, client_all = np.concatenate(true_gaps) / MS, np.concatenate(client_gaps) / MS
    flagged = sum(1 for t in result.timelines if t.meta.get("client_lagged"))
    shared = sum(int(t.meta.get("stamps_shared", 0)) for t in result.timelines)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return Level(
        streams=streams,
        stamps=stamps,
        sender=sender,
        paired_gaps=len(error),
        error_p50_ms=float(np.percentile(error, 50)),
        error_p99_ms=float(np.percentile(error, 99)),
        error_max_ms=float(error.max()),
        beyond_send_p99_ms=float(np.percentile(outside, 99)),
        beyond_send_max_ms=float(outside.max()),
        flagged_share=flagged / max(1, len(result.timelines)),
        loop_lag_p99_ms=result.loop_lag.p99_ms,
        loop_lag_max_ms=result.loop_lag.max_ms,
        schedule_lag_p99_ms=result.schedule_lag.p99_ms,
        true_gap_p50_ms=float(np.percentile(true_all, 50)),
        true_gap_p99_ms=float(np.percentile(true_all, 99)),
        client_gap_p50_ms=float(np.percentile(client_all, 50)),
        client_gap_p99_ms=float(np.percentile(client_all, 99)),
        client_cpu_s=cpu,
        client_cpu_us_per_event=cpu / max(1, events) * 1e6,
        stamps_shared=shared,
        elapsed_s=elapsed,
    )


# AIPerf needs a tokenizer to build prompts, and its "builtin" one downloads tiktoken's
# vocabulary at run time. Offline, a byte-level tokenizer built locally in AIPerf's own
# environment serves: prompts are made of it, and token counts come from the server's usage.
_BYTE_TOKENIZER = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(sys.argv[1])
"""


def run_aiperf(aiperf: str, streams: int, tokens: int, workdir: Path) -> dict[str, float | None]:
    """AIPerf against a fresh lab at the same concurrency, its gaps paired with the truth.

    AIPerf sends an ``X-Request-ID`` per request and records it with the request's
    ``inter_chunk_latency`` list, so its gaps pair with the lab's like ours do.
    """
    tokenizer = workdir / "byte-tokenizer"
    if not tokenizer.exists():
        python = str(Path(aiperf).with_name("python"))
        subprocess.run([python, "-c", _BYTE_TOKENIZER, str(tokenizer)], check=True)
    scenario = workdir / "fidelity.yaml"
    scenario.write_text(SCENARIO.format(cadence=CADENCE_MS, tokens=tokens))
    record = workdir / f"aiperf-truth-{streams}.jsonl"
    record.unlink(missing_ok=True)
    artifacts = workdir / f"aiperf-{streams}"
    with lab_process(scenario, record) as url:
        command = [aiperf, "profile", "--model", "lab", "--url", url, "--endpoint-type", "chat"]
        command += ["--streaming", "--concurrency", str(streams), "--request-count", str(streams)]
        command += ["--synthetic-input-tokens-mean", "64", "--output-tokens-mean", str(tokens)]
        command += ["--extra-inputs", "ignore_eos:true", "--use-server-token-count"]
        command += ["--tokenizer", str(tokenizer), "--artifact-dir", str(artifacts)]
        command += ["--ui-type", "none"]
        subprocess.run(command, check=True, timeout=900, stdout=subprocess.DEVNULL)
        time.sleep(0.5)
    truth = {t.stream_id: t for t in read_jsonl(record).timelines}
    # AIPerf's export read by the importer (docs/format.md#peers): one timeline per request,
    # named by its X-Request-ID, with AIPerf's own inter-chunk latencies as its gaps.
    imported = read_timelines(next(artifacts.rglob("profile_export.jsonl"))).timelines
    errors, gaps, lab_gaps = [], [], []
    for stream in imported:
        lab = truth.get(stream.stream_id)
        if lab is None or int(stream.text_mask.sum()) < 2:
            continue
        theirs = np.diff(stream.times[stream.text_mask]).astype(np.float64)
        true_gaps = np.diff(lab.times[lab.text_mask]).astype(np.float64)
        n = min(len(theirs), len(true_gaps))
        errors.append(np.abs(theirs[:n] - true_gaps[:n]))
        gaps.append(theirs)
        lab_gaps.append(true_gaps)
    if not errors:
        return {"paired_requests": 0}
    error = np.concatenate(errors) / MS
    theirs_all, lab_all = np.concatenate(gaps) / MS, np.concatenate(lab_gaps) / MS
    worst = fleet_metrics(imported).p99_of_worst_gap_s
    return {
        "paired_requests": len(errors),
        "aiperf_p99_of_worst_gap_ms": None if worst is None else worst * 1000,
        "error_p50_ms": float(np.percentile(error, 50)),
        "error_p99_ms": float(np.percentile(error, 99)),
        "error_max_ms": float(error.max()),
        "aiperf_gap_p50_ms": float(np.percentile(theirs_all, 50)),
        "aiperf_gap_p99_ms": float(np.percentile(theirs_all, 99)),
        "lab_gap_p50_ms": float(np.percentile(lab_all, 50)),
        "lab_gap_p99_ms": float(np.percentile(lab_all, 99)),
    }


def _peer_line(peer: dict[str, float | None]) -> str:
    if not peer.get("paired_requests"):
        return "no request paired with the lab's ground truth"
    return (
        f"|gap - lab gap| p50 {peer['error_p50_ms']:.3f} ms, p99 {peer['error_p99_ms']:.3f} ms, "
        f"max {peer['error_max_ms']:.1f} ms over {peer['paired_requests']} requests; its gap "
        f"p50/p99 {peer['aiperf_gap_p50_ms']:.2f}/{peer['aiperf_gap_p99_ms']:.2f} ms, the lab's "
        f"{peer['lab_gap_p50_ms']:.2f}/{peer['lab_gap_p99_ms']:.2f} ms; imported, its p99 of the"
        f" per-stream worst gap {peer['aiperf_p99_of_worst_gap_ms'] or float('nan'):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="100,500,1000", help="comma-separated loads")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per stream")
    parser.add_argument("--ramp", default="5s", help="slots open over this long")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--sender", choices=("raw", "lab"), default="raw", help="who writes")
    parser.add_argument("--stamps", default="kernel,user", help="stamp modes, side by side")
    parser.add_argument("--peer-aiperf", help="path to an aiperf executable to compare")
    args = parser.parse_args()
    quiet_gc()  # the client runs here: tune this process as the steadystream command does
    loads = [int(v) for v in args.streams.split(",")]
    ramp_ns = parse_duration(args.ramp, name="--ramp")
    results: list[Level] = []
    peers: dict[int, dict[str, float | None]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for streams in loads:
            for stamps in args.stamps.split(","):
                level = measure(
                    streams, args.tokens, ramp_ns, workdir, sender=args.sender, stamps=stamps
                )
                results.append(level)
                print(
                    f"{streams:>5} streams, {stamps:>6} stamps: |client gap - true gap| p50 "
                    f"{level.error_p50_ms:.3f} ms, p99 {level.error_p99_ms:.3f} ms, max "
                    f"{level.error_max_ms:.2f} ms over {level.paired_gaps} gaps (beyond the "
                    f"send window p99 {level.beyond_send_p99_ms:.3f}, max "
                    f"{level.beyond_send_max_ms:.2f} ms); flagged "
                    f"{level.flagged_share:.1%}; shared stamps {level.stamps_shared}; loop lag "
                    f"p99 {level.loop_lag_p99_ms or 0:.2f} ms, max {level.loop_lag_max_ms or 0:.1f}"
                    f" ms; client CPU {level.client_cpu_us_per_event:.1f} us/event "
                    f"({level.client_cpu_s:.1f} s in {level.elapsed_s:.1f} s)",
                    flush=True,
                )
            if args.peer_aiperf:
                peers[streams] = peer = run_aiperf(args.peer_aiperf, streams, args.tokens, workdir)
                print(f"{streams:>5} streams, AIPerf: " + _peer_line(peer), flush=True)
    degraded = next(
        (r.streams for r in results if r.error_p99_ms > DEGRADED_P99_MS and r.stamps != "user"),
        None,
    )
    print(
        "degrades at: "
        + (
            f"{degraded} streams (p99 error > {DEGRADED_P99_MS} ms)"
            if degraded
            else "none of these"
        )
    )
    if args.json:
        payload = {"levels": [asdict(r) for r in results], "peers": peers, "degrades_at": degraded}
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
