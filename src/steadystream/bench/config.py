"""Every option of a bench run, declared once: type, default, check, and its command-line face.

:class:`BenchConfig` is what ``steadystream bench`` parses its command line into and what a
Python caller builds by hand; both get the same checks, at construction, with the messages
the command line prints (they name options as ``--flag``, the field's name with dashes).
Each field carries a :class:`Flag`: its help, its help panel and any short names. The
command line is generated from these fields (:mod:`steadystream.cli._models`, as for every
command), so adding an option is one field here, and the code that uses it (``engine_metrics``
below came so)::

    engine_metrics: Annotated[str | None, Flag("Scrape engine metrics ...", OUTPUT)] = None

The options bench shares with other commands (``--stall-threshold``, ``--ttft-target``,
``--max-regression``, ``--keep-text``, ``--ray-address``) are the shared definitions of
:mod:`steadystream._options`, default and help included; a :class:`Panel` places them here.

Durations are written as on the command line (``"400ms"``; a bare number is seconds) and
held as integer nanoseconds. Values that name things outside the process (the prompts file,
the trace, the API key's environment variable, the output folder) are read when the run is
planned (:func:`steadystream.bench.plan.plan_bench`), not here. Values written as text
(token counts, the cancel point, the sweep, SLOs, gate limits) stay text, checked by the
parsers the plan uses; those are imported only when a value is checked, so that
``steadystream bench --help`` stays instant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from steadystream._clock import NS_PER_S
from steadystream._exceptions import SpecError
from steadystream._flags import Flag, Panel, option_name
from steadystream._options import KeepText, MaxRegression, RayAddress, StallThreshold, TtftTarget
from steadystream._validation import Duration, Texts, describe_errors

if TYPE_CHECKING:
    from steadystream.bench.endpoint import Endpoint
    from steadystream.bench.sweep import SweepPlan

__all__ = [
    "CANCELLATION",
    "GATE_AND_SWEEP",
    "LOAD",
    "OUTPUT",
    "REQUESTS",
    "SCALE",
    "WORKLOAD",
    "BenchConfig",
    "Flag",
    "option_name",
]

LOAD = "Load"
WORKLOAD = "Workload"
REQUESTS = "Requests"
CANCELLATION = "Cancellation"
GATE_AND_SWEEP = "Gate and sweep"
OUTPUT = "Output"
SCALE = "Scale out (Ray)"


def _checked(parse: Callable[[str], object]) -> Callable[[str | None], str | None]:
    """A validator that checks text with the parser the plan uses, and keeps the text."""

    def check(value: str | None) -> str | None:
        if value is not None:
            parse(value)  # a SpecError names the option; pydantic lets it through as it is
        return value

    return check


def _token_count(name: str) -> Callable[[str | None], str | None]:
    def parse(text: str) -> object:
        from steadystream.bench.workload import TokenCount

        return TokenCount.parse(text, name=name)

    return _checked(parse)


def _engine_metrics(text: str) -> object:
    from steadystream.engine_metrics import check_option

    return check_option(text)


def _cancel_point(text: str) -> object:
    from steadystream.bench.cancel import CancelPoint

    return CancelPoint.parse(text)


def _disconnect(text: str) -> object:
    from steadystream.bench.disconnect import DisconnectPolicy

    return DisconnectPolicy.parse(text)


def _sweep_plan(text: str) -> SweepPlan:
    from steadystream.bench.sweep import SweepPlan

    return SweepPlan.parse(text)


def _objectives(texts: tuple[str, ...]) -> tuple[str, ...]:
    from steadystream.bench.sweep import Objective

    if not texts:
        raise SpecError("--slo: a sweep needs at least one objective")
    for text in texts:
        Objective.parse(text)
    return texts


def _default_slo() -> tuple[str, ...]:
    from steadystream.bench.sweep import DEFAULT_SLO

    return DEFAULT_SLO


def _gate_rules(texts: tuple[str, ...]) -> tuple[str, ...]:
    from steadystream.bench.gate import parse_rules

    parse_rules(texts)
    return texts


def _labels(value: Any) -> Any:
    """``key=value`` texts (as ``--label`` takes them) into a mapping; a mapping as it is."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) or not isinstance(value, Sequence):
        return value  # pydantic says what a mapping is
    labels = {}
    for text in value:
        key, sep, label = str(text).partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--label: expected key=value, got {text!r}")
        labels[key.strip()] = label.strip()
    return labels


def _output(path: Path | None) -> Path | None:
    if path is not None and not str(path).endswith((".jsonl", ".jsonl.gz")):
        raise SpecError(f"--output: bench writes JSONL as it goes; use .jsonl, not {path}")
    return path


class BenchConfig(BaseModel):
    """One bench run (or sweep): what to load, how, what to record, and how to judge it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[str, Flag("API base URL, e.g. http://127.0.0.1:8000/v1", argument=True)]
    model: Annotated[str, Flag("Model name to request.", names=("--model", "-m"))]
    output: Annotated[
        Path | None,
        AfterValidator(_output),
        Flag("Timeline file (default: bench-DATE-TIME.jsonl).", OUTPUT, ("--output", "-o")),
    ] = None
    endpoint: Annotated[
        Literal["chat", "completions", "responses", "messages"],
        Flag(
            "The API: chat (completions), completions, responses (OpenAI Responses) or"
            " messages (Anthropic Messages).",
            REQUESTS,
        ),
    ] = "chat"
    api_key_env: Annotated[
        str | None, Flag("Environment variable holding the API key.", REQUESTS, metavar="NAME")
    ] = None
    headers: Annotated[
        Texts,
        Flag(
            "Extra header 'Name: value' (repeatable).",
            REQUESTS,
            ("--header", "-H"),
            metavar="'NAME: VALUE'",
        ),
    ] = ()
    request_id_header: Annotated[
        str,
        Flag(
            "Header that carries each request's id, or 'none' (llama-cpp-python"
            " refuses ids that are not UUIDs).",
            REQUESTS,
        ),
    ] = "X-Request-Id"
    usage: Annotated[
        Literal["auto", "continuous", "on", "off"],
        Flag("Ask for token usage: auto, continuous, on or off.", REQUESTS),
    ] = "auto"
    ignore_eos: Annotated[
        bool, Flag("Ask vLLM-style servers to generate exactly max_tokens.", REQUESTS)
    ] = False
    concurrency: Annotated[
        int | None,
        Field(ge=1),
        Flag("Closed loop: streams in flight (with --rate: a cap).", LOAD),
    ] = None
    rate: Annotated[
        float | None,
        Field(gt=0, allow_inf_nan=False),
        Flag("Open loop: requests per second.", LOAD),
    ] = None
    burstiness: Annotated[
        float,
        Field(gt=0, allow_inf_nan=False),
        Flag("Gamma shape of open-loop gaps; 1 = Poisson.", LOAD),
    ] = 1.0
    ramp: Annotated[
        Duration | None,
        Field(ge=0),
        Flag("Grow the load from 0 over this long, e.g. 30s.", LOAD, text=True),
    ] = None
    trace: Annotated[Path | None, Flag("Arrival times from a trace file.", LOAD)] = None
    requests: Annotated[int | None, Field(ge=1), Flag("Stop after this many requests.", LOAD)] = (
        None
    )
    duration: Annotated[
        Duration | None, Field(gt=0), Flag("Stop sending after this long.", LOAD, text=True)
    ] = None
    grace: Annotated[
        Duration,
        Flag("After --duration, how long streams in flight may finish.", LOAD, text=True),
    ] = Field(30 * NS_PER_S, ge=0)
    warmup: Annotated[
        int,
        Field(ge=0),
        Flag(
            "Unrecorded requests sent first, one by one (one-time costs stay out); with --ray,"
            " on every worker.",
            LOAD,
        ),
    ] = 1
    prompts: Annotated[
        Path | None, Flag("Prompts JSONL (default: the built-in set).", WORKLOAD)
    ] = None
    input_tokens: Annotated[
        str | None,
        AfterValidator(_token_count("--input-tokens")),
        Flag("Synthetic prompts of N tokens: 256, uniform:100-400, normal:300,50.", WORKLOAD),
    ] = None
    output_tokens: Annotated[
        str | None,
        AfterValidator(_token_count("--output-tokens")),
        Flag("max_tokens per request, drawn: 256, uniform:..., normal:...", WORKLOAD),
    ] = None
    max_tokens: Annotated[
        int | None,
        Field(ge=1, le=10_000_000),  # workload.MAX_TOKEN_COUNT (imported lazily: --help)
        Flag("Cap on max_tokens.", WORKLOAD),
    ] = None
    seed: Annotated[int, Flag("Seed of arrivals, prompts and cancellations.", WORKLOAD)] = 0
    cancel: Annotated[
        float,
        Field(ge=0, le=1, allow_inf_nan=False),
        Flag("Fraction of streams to cancel mid-way.", CANCELLATION),
    ] = 0.0
    cancel_after: Annotated[
        str | None,
        AfterValidator(_checked(_cancel_point)),
        Flag("When to cancel: 20tok or 500ms.", CANCELLATION),
    ] = None
    disconnect: Annotated[
        str | None,
        AfterValidator(_checked(_disconnect)),
        Flag(
            "Readers who drop and resume: after=40tok,back=2s,share=0.25 (needs a gateway"
            " that keeps streams).",
            CANCELLATION,
        ),
    ] = None
    lab_truth: Annotated[
        Literal["auto", "on", "off"],
        Flag("Read cancellation ground truth from a lab: auto, on, off.", CANCELLATION),
    ] = "auto"
    stamps: Annotated[
        Literal["auto", "kernel", "user"],
        Flag(
            "Arrival stamps: auto (the kernel's where the platform gives them), kernel, user.",
            REQUESTS,
        ),
    ] = "auto"
    timeout: Annotated[
        Duration,
        Flag("Read timeout: no bytes for this long fails a stream.", REQUESTS, text=True),
    ] = Field(120 * NS_PER_S, gt=0)
    finish_timeout: Annotated[
        Duration,
        Flag(
            "After a finish reason, the longest silence before the client closes a body the"
            " server never ends (the stream is whole: meta.end_missing_ms says so).",
            REQUESTS,
            text=True,
        ),
    ] = Field(5 * NS_PER_S, gt=0)
    labels: Annotated[
        dict[str, str],
        BeforeValidator(_labels),
        Flag(
            "key=value on every stream (route, tenant...).",
            OUTPUT,
            ("--label",),
            metavar="KEY=VALUE",
        ),
    ] = {}
    keep_text: Annotated[KeepText, Panel(OUTPUT)]
    engine_metrics: Annotated[
        str | None,
        AfterValidator(_checked(_engine_metrics)),
        Flag(
            "Scrape engine metrics every 100 ms into RUN.engine-metrics.jsonl: auto (the"
            " server's own /metrics, when it answers) or a URL.",
            OUTPUT,
            metavar="auto|URL",
        ),
    ] = None
    otel_endpoint: Annotated[
        str | None,
        Flag(
            "Send a span per stream and the GenAI metrics over OTLP to this collector (default:"
            " $OTEL_EXPORTER_OTLP_ENDPOINT when set; the otel extra).",
            OUTPUT,
            metavar="URL",
        ),
    ] = None
    stall_threshold: Annotated[StallThreshold, Panel(GATE_AND_SWEEP)]
    ttft_target: Annotated[TtftTarget, Panel(GATE_AND_SWEEP)]
    gate: Annotated[
        Path | None, Flag("Gate the run against this baseline run.", GATE_AND_SWEEP)
    ] = None
    max_regression: Annotated[MaxRegression, AfterValidator(_gate_rules), Panel(GATE_AND_SWEEP)]
    sweep: Annotated[
        str | None,
        AfterValidator(_checked(_sweep_plan)),
        Flag("rates=1,2,4,8 | rates=search:1-64 | concurrency=1,4,16.", GATE_AND_SWEEP),
    ] = None
    slo: Annotated[
        Texts,
        AfterValidator(_objectives),
        Flag(
            "Sweep objective, e.g. goodput>=99% (default: that and ttft_p95<=800ms).",
            GATE_AND_SWEEP,
            metavar="OBJECTIVE",
        ),
    ] = Field(default_factory=_default_slo)
    cooldown: Annotated[Duration, Flag("Pause between sweep loads.", GATE_AND_SWEEP, text=True)] = (
        Field(2 * NS_PER_S, ge=0)
    )
    ray: Annotated[
        bool,
        Flag(
            "Spread the streams over Ray actors, one event loop each (needs the ray extra;"
            " a local Ray unless RAY_ADDRESS or --ray-address says where).",
            SCALE,
        ),
    ] = False
    workers: Annotated[
        int | None,
        Field(ge=1),
        Flag("With --ray: how many actors (default: the Ray cluster's CPUs).", SCALE),
    ] = None
    ray_address: Annotated[RayAddress, Panel(SCALE)]

    @property
    def on_ray(self) -> bool:
        """Whether the run is spread over Ray actors (``--ray`` or ``--ray-address``)."""
        return self.ray or self.ray_address is not None

    def __init__(self, **values: Any) -> None:
        """Check ``values``; anything wrong is one :class:`SpecError` naming the option."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            message = describe_errors(exc, "bench", type(self), name=_option_of)
            raise SpecError(message.removeprefix("bench: ")) from None

    @classmethod
    def from_options(cls, values: Mapping[str, Any]) -> BenchConfig:
        """The options in ``values`` (by field name), as the command line passes them."""
        return cls(**values)

    def to_endpoint(self, api_key: str | None = None) -> Endpoint:
        """The endpoint these options describe (the plan adds the key it reads)."""
        from steadystream.bench.endpoint import Endpoint, headers_from

        id_header = self.request_id_header
        return Endpoint(
            self.url,
            self.model,
            kind=self.endpoint,
            api_key=api_key,
            headers=headers_from(self.headers),
            usage=self.usage,
            ignore_eos=self.ignore_eos,
            request_id_header=None if id_header.lower() == "none" else id_header,
        )

    @model_validator(mode="after")
    def _combinations(self) -> BenchConfig:
        """Options that exclude or need each other (docs/bench.md), and the endpoint's."""
        self.to_endpoint()  # the URL, the headers and the request-id header
        if self.input_tokens is not None and self.prompts is not None:
            raise SpecError("--prompts and --input-tokens cannot be combined: pick one source")
        if (self.cancel > 0) != (self.cancel_after is not None):
            raise SpecError("--cancel FRACTION and --cancel-after 20tok|500ms go together")
        if self.trace is not None:
            if self.rate is not None:
                raise SpecError("--trace and --rate cannot be combined: the trace says when")
            if self.ramp:
                raise SpecError("--ramp does not apply to a trace")
        if self.sweep is not None:
            self._check_sweep(self.sweep)
        if self.workers is not None and not self.on_ray:
            raise SpecError("--workers spreads a run over Ray actors: add --ray")
        if self.ray_address is not None and not self.ray_address.strip():
            raise SpecError("--ray-address: empty; leave it out for a local Ray (or RAY_ADDRESS)")
        closed_loop = self.rate is None and self.trace is None and self.sweep is None
        slots = self.concurrency if self.concurrency is not None else (1 if closed_loop else None)
        where = f"--concurrency {slots}"
        if self.sweep is not None and self.workers is not None:
            plan = _sweep_plan(self.sweep)
            if plan.dimension == "concurrency":
                # The first load measured is the smallest (a search starts at its low end):
                # refused here, before Ray starts and the output file is opened.
                slots = int(plan.search[0] if plan.search is not None else min(plan.loads))
                where = f"the sweep's smallest concurrency, {slots}"
        if self.workers is not None and slots is not None and slots < self.workers:
            raise SpecError(
                f"--workers {self.workers} is more than {where}:"
                " each worker needs at least one stream in flight"
            )
        return self

    def _check_sweep(self, sweep: str) -> None:
        dimension = _sweep_plan(sweep).dimension
        if self.trace is not None:
            raise SpecError("--sweep and --trace cannot be combined")
        if dimension == "rate" and self.rate is not None:
            raise SpecError("--sweep rates=... sets the rate: leave out --rate")
        if dimension == "concurrency" and (self.concurrency or self.rate) is not None:
            raise SpecError("--sweep concurrency=... sets the concurrency: leave out --concurrency")
        if self.gate is not None:
            raise SpecError("--gate compares one run; it does not apply to a sweep")


def _option_of(loc: Sequence[str]) -> str:
    return option_name(loc[0]) if loc else "bench"
