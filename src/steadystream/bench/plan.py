"""A checked :class:`BenchConfig` turned into the objects a run needs, reading what it names.

Planning is where the outside world is consulted: the API key's environment variable, the
prompts and trace files, the output folder, and the gate's baseline run (read before the
run, so a bad baseline fails in a second rather than after a long run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from steadystream._clock import NS_PER_S
from steadystream._exceptions import SpecError
from steadystream.bench.cancel import CancelPoint, CancelPolicy
from steadystream.bench.config import BenchConfig
from steadystream.bench.disconnect import DisconnectPolicy
from steadystream.bench.endpoint import Endpoint
from steadystream.bench.gate import GateRule, parse_rules
from steadystream.bench.runner import RunOptions
from steadystream.bench.schedule import ClosedLoop, OpenLoop, Schedule, read_trace
from steadystream.bench.sweep import Objective, SweepPlan
from steadystream.bench.verdict import LoadedRun, load_run
from steadystream.bench.workload import Prompt, TokenCount, Workload, builtin_prompts, read_prompts
from steadystream.metrics import MetricConfig
from steadystream.stamped import StampMode, resolve_stamps

__all__ = ["DEFAULT_REQUESTS", "BenchPlan", "plan_bench"]

DEFAULT_REQUESTS = 100
"""A run with no --requests, --duration or --trace stops after this many requests."""


@dataclass(frozen=True)
class BenchPlan:
    """Everything a bench run needs, built and checked."""

    config: BenchConfig
    endpoint: Endpoint
    workload: Workload
    schedule: Schedule | None  # None when sweeping: each load makes its own
    options: RunOptions
    metrics: MetricConfig
    output: Path
    sweep: SweepPlan | None
    objectives: tuple[Objective, ...]
    baseline: LoadedRun | None  # the gate's baseline, read before the run
    gate_rules: tuple[GateRule, ...]  # the default limits, and --max-regression's
    stamps: StampMode  # --stamps resolved: what this platform gives (docs/bench.md)

    @property
    def read_timeout_s(self) -> float:
        return self.config.timeout / NS_PER_S

    @property
    def finish_timeout_s(self) -> float:
        return self.config.finish_timeout / NS_PER_S

    def schedule_for(self, load: float) -> Schedule:
        """One load of the sweep: open loop at ``load`` req/s, or ``load`` streams in flight."""
        config = self.config
        if self.sweep is not None and self.sweep.dimension == "rate":
            ramp = config.ramp or 0
            return OpenLoop(load, config.burstiness, config.seed, ramp, config.concurrency)
        return ClosedLoop(int(load), config.ramp or 0)


def plan_bench(config: BenchConfig, *, environ: Mapping[str, str] | None = None) -> BenchPlan:
    """Build the run's parts; raise :class:`~steadystream.InputError` on what cannot be used."""
    environ = os.environ if environ is None else environ
    if config.on_ray:
        from steadystream._ray import import_ray

        import_ray()  # without the extra: say so now, not after the output file was opened
    api_key = None
    if config.api_key_env is not None:
        api_key = environ.get(config.api_key_env)
        if not api_key:
            raise SpecError(
                f"--api-key-env: the environment variable {config.api_key_env} is empty"
            )
    endpoint = config.to_endpoint(api_key)
    output = config.output or Path(time.strftime("bench-%Y%m%d-%H%M%S.jsonl"))
    if not output.parent.is_dir():
        raise SpecError(f"--output: the folder {output.parent} does not exist")
    sweep = SweepPlan.parse(config.sweep) if config.sweep is not None else None
    return BenchPlan(
        config=config,
        endpoint=endpoint,
        workload=_workload(config),
        schedule=None if sweep is not None else _schedule(config),
        options=_options(config),
        metrics=MetricConfig(
            stall_threshold_ns=config.stall_threshold, ttft_target_ns=config.ttft_target
        ),
        output=output,
        sweep=sweep,
        objectives=tuple(Objective.parse(text) for text in config.slo),
        baseline=None if config.gate is None else load_run(config.gate),
        gate_rules=tuple(parse_rules(config.max_regression)),
        stamps=resolve_stamps(config.stamps),
    )


def _workload(config: BenchConfig) -> Workload:
    prompts: tuple[Prompt, ...] = ()
    if config.input_tokens is None:
        prompts = read_prompts(config.prompts) if config.prompts is not None else builtin_prompts()
    return Workload(
        prompts=prompts,
        input_tokens=_tokens(config.input_tokens, "--input-tokens"),
        output_tokens=_tokens(config.output_tokens, "--output-tokens"),
        max_tokens=config.max_tokens,
        seed=config.seed,
    )


def _tokens(text: str | None, name: str) -> TokenCount | None:
    return None if text is None else TokenCount.parse(text, name=name)


def _options(config: BenchConfig) -> RunOptions:
    cancel = None
    if config.cancel_after is not None:
        cancel = CancelPolicy(config.cancel, CancelPoint.parse(config.cancel_after), config.seed)
    disconnect = None
    if config.disconnect is not None:
        disconnect = DisconnectPolicy.parse(config.disconnect, seed=config.seed)
    requests = config.requests
    if requests is None and config.duration is None and config.trace is None:
        requests = DEFAULT_REQUESTS
    return RunOptions(
        max_requests=requests,
        duration_ns=config.duration,
        grace_ns=config.grace,
        cancel=cancel,
        disconnect=disconnect,
    )


def _schedule(config: BenchConfig) -> Schedule:
    ramp = config.ramp or 0
    if config.trace is not None:
        return read_trace(config.trace, max_concurrency=config.concurrency)
    if config.rate is not None:
        return OpenLoop(config.rate, config.burstiness, config.seed, ramp, config.concurrency)
    return ClosedLoop(config.concurrency or 1, ramp)
