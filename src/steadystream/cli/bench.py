"""``steadystream bench``: load an OpenAI-compatible endpoint and record every stream.

Only typer and the standard library are imported here; the work is in ``_bench_run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app

_LOAD = "Load"
_WORK = "Workload"
_REQ = "Requests"
_CANCEL = "Cancellation"
_JUDGE = "Gate and sweep"
_OUT = "Output"


@dataclass(frozen=True)
class BenchArgs:
    """The command line, as given (checked and turned into objects by ``_bench_run``)."""

    url: str
    model: str
    output: Path | None
    endpoint: str
    api_key_env: str | None
    headers: list[str]
    request_id_header: str
    usage: str
    ignore_eos: bool
    concurrency: int | None
    rate: float | None
    burstiness: float
    ramp: str | None
    trace: Path | None
    requests: int | None
    duration: str | None
    grace: str
    warmup: int
    prompts: Path | None
    input_tokens: str | None
    output_tokens: str | None
    max_tokens: int | None
    seed: int
    cancel: float
    cancel_after: str | None
    lab_truth: str
    timeout: str
    labels: list[str]
    keep_text: bool
    stall_threshold: str
    ttft_target: str
    gate: Path | None
    max_regression: list[str]
    sweep: str | None
    slo: list[str]
    cooldown: str
    live: bool
    json_output: bool


@app.command()
def bench(
    url: Annotated[str, typer.Argument(help="API base URL, e.g. http://127.0.0.1:8000/v1")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model name to request.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Timeline file (default: bench-DATE-TIME.jsonl).",
            rich_help_panel=_OUT,
        ),
    ] = None,
    endpoint: Annotated[
        str, typer.Option(help="chat or completions.", rich_help_panel=_REQ)
    ] = "chat",
    api_key_env: Annotated[
        str | None,
        typer.Option(help="Environment variable holding the API key.", rich_help_panel=_REQ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header", "-H", help="Extra header 'Name: value' (repeatable).", rich_help_panel=_REQ
        ),
    ] = None,
    request_id_header: Annotated[
        str,
        typer.Option(
            help="Header that carries each request's id, or 'none' (llama-cpp-python"
            " refuses ids that are not UUIDs).",
            rich_help_panel=_REQ,
        ),
    ] = "X-Request-Id",
    usage: Annotated[
        str,
        typer.Option(
            help="Ask for token usage: auto, continuous, on or off.", rich_help_panel=_REQ
        ),
    ] = "auto",
    ignore_eos: Annotated[
        bool,
        typer.Option(
            help="Ask vLLM-style servers to generate exactly max_tokens.", rich_help_panel=_REQ
        ),
    ] = False,
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="Closed loop: streams in flight (with --rate: a cap).", rich_help_panel=_LOAD
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Open loop: requests per second.", rich_help_panel=_LOAD)
    ] = None,
    burstiness: Annotated[
        float,
        typer.Option(help="Gamma shape of open-loop gaps; 1 = Poisson.", rich_help_panel=_LOAD),
    ] = 1.0,
    ramp: Annotated[
        str | None,
        typer.Option(help="Grow the load from 0 over this long, e.g. 30s.", rich_help_panel=_LOAD),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(help="Arrival times from a trace file.", rich_help_panel=_LOAD),
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="Stop after this many requests.", rich_help_panel=_LOAD)
    ] = None,
    duration: Annotated[
        str | None, typer.Option(help="Stop sending after this long.", rich_help_panel=_LOAD)
    ] = None,
    grace: Annotated[
        str,
        typer.Option(
            help="After --duration, how long streams in flight may finish.", rich_help_panel=_LOAD
        ),
    ] = "30s",
    warmup: Annotated[
        int,
        typer.Option(
            help="Unrecorded requests sent first, one by one (one-time costs stay out).",
            rich_help_panel=_LOAD,
        ),
    ] = 1,
    prompts: Annotated[
        Path | None,
        typer.Option(help="Prompts JSONL (default: the built-in set).", rich_help_panel=_WORK),
    ] = None,
    input_tokens: Annotated[
        str | None,
        typer.Option(
            help="Synthetic prompts of N tokens: 256, uniform:100-400, normal:300,50.",
            rich_help_panel=_WORK,
        ),
    ] = None,
    output_tokens: Annotated[
        str | None,
        typer.Option(
            help="max_tokens per request, drawn: 256, uniform:..., normal:...",
            rich_help_panel=_WORK,
        ),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Cap on max_tokens.", rich_help_panel=_WORK)
    ] = None,
    seed: Annotated[
        int,
        typer.Option(help="Seed of arrivals, prompts and cancellations.", rich_help_panel=_WORK),
    ] = 0,
    cancel: Annotated[
        float,
        typer.Option(help="Fraction of streams to cancel mid-way.", rich_help_panel=_CANCEL),
    ] = 0.0,
    cancel_after: Annotated[
        str | None,
        typer.Option(help="When to cancel: 20tok or 500ms.", rich_help_panel=_CANCEL),
    ] = None,
    lab_truth: Annotated[
        str,
        typer.Option(
            help="Read cancellation ground truth from a lab: auto, on, off.",
            rich_help_panel=_CANCEL,
        ),
    ] = "auto",
    timeout: Annotated[
        str,
        typer.Option(
            help="Read timeout: no bytes for this long fails a stream.", rich_help_panel=_REQ
        ),
    ] = "120s",
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", help="key=value on every stream (route, tenant...).", rich_help_panel=_OUT
        ),
    ] = None,
    keep_text: Annotated[
        bool, typer.Option(help="Store the answers' text in the file.", rich_help_panel=_OUT)
    ] = False,
    stall_threshold: Annotated[
        str, typer.Option(help="A gap above this is a stall.", rich_help_panel=_JUDGE)
    ] = "400ms",
    ttft_target: Annotated[
        str, typer.Option(help="TTFT target for ITL goodput.", rich_help_panel=_JUDGE)
    ] = "800ms",
    gate: Annotated[
        Path | None,
        typer.Option(help="Gate the run against this baseline run.", rich_help_panel=_JUDGE),
    ] = None,
    max_regression: Annotated[
        list[str] | None,
        typer.Option(
            "--max-regression", "-r", help="Gate limits, as for `gate`.", rich_help_panel=_JUDGE
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            help="rates=1,2,4,8 | rates=search:1-64 | concurrency=1,4,16.", rich_help_panel=_JUDGE
        ),
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            help="Sweep objective, e.g. goodput>=99% (default: that and ttft_p95<=800ms).",
            rich_help_panel=_JUDGE,
        ),
    ] = None,
    cooldown: Annotated[
        str, typer.Option(help="Pause between sweep loads.", rich_help_panel=_JUDGE)
    ] = "2s",
    live: Annotated[
        bool, typer.Option(help="Show the live view (on a terminal).", rich_help_panel=_OUT)
    ] = True,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON.", rich_help_panel=_OUT)
    ] = False,
) -> None:
    """Load an endpoint, record every stream's timeline, and summarise the jitter.

    Exit codes: 0 done; 1 the gate failed or no sweep load met the SLO; 2 unusable input;
    3 no stream succeeded; 130 interrupted (what finished is kept).
    """
    from steadystream.cli._bench_run import execute

    args = BenchArgs(
        url=url,
        model=model,
        output=output,
        endpoint=endpoint,
        api_key_env=api_key_env,
        headers=header or [],
        request_id_header=request_id_header,
        usage=usage,
        ignore_eos=ignore_eos,
        concurrency=concurrency,
        rate=rate,
        burstiness=burstiness,
        ramp=ramp,
        trace=trace,
        requests=requests,
        duration=duration,
        grace=grace,
        warmup=warmup,
        prompts=prompts,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        max_tokens=max_tokens,
        seed=seed,
        cancel=cancel,
        cancel_after=cancel_after,
        lab_truth=lab_truth,
        timeout=timeout,
        labels=label or [],
        keep_text=keep_text,
        stall_threshold=stall_threshold,
        ttft_target=ttft_target,
        gate=gate,
        max_regression=max_regression or [],
        sweep=sweep,
        slo=slo or [],
        cooldown=cooldown,
        live=live,
        json_output=json_output,
    )
    code = execute(args)
    if code:
        raise typer.Exit(code)
