"""The public names of :mod:`steadystream.bench`, imported on first use (see ``__init__``)."""

from steadystream.bench.cancel import CancelPoint, CancelPolicy, LabTruthClient
from steadystream.bench.client import Sent, StreamClient, open_session
from steadystream.bench.config import BenchConfig
from steadystream.bench.endpoint import Endpoint
from steadystream.bench.entrypoint import BenchHooks, BenchOutcome, run_bench
from steadystream.bench.fidelity import StreamFidelity, compare_stream, lab_timeline
from steadystream.bench.gate import DEFAULT_RULES, GateReport, GateRule, compare, parse_rules
from steadystream.bench.health import ClientHealth, client_health
from steadystream.bench.lag import LAG_FLAG_NS, LagStats, LoopLagSampler
from steadystream.bench.plan import BenchPlan, plan_bench
from steadystream.bench.progress import ProgressSnapshot, RunProgress
from steadystream.bench.runner import BenchRunner, RunOptions, RunResult
from steadystream.bench.schedule import (
    ClosedLoop,
    Dispatcher,
    OpenLoop,
    Schedule,
    Ticket,
    TraceSchedule,
    read_trace,
)
from steadystream.bench.session import Bench
from steadystream.bench.summary import Summary, summarise
from steadystream.bench.sweep import DEFAULT_SLO, Objective, SweepPlan, SweepResult, run_sweep
from steadystream.bench.verdict import GateVerdict, judge_runs, load_run
from steadystream.bench.workload import (
    Prompt,
    RequestSpec,
    TokenCount,
    Workload,
    builtin_prompts,
    read_prompts,
)

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_SLO",
    "LAG_FLAG_NS",
    "Bench",
    "BenchConfig",
    "BenchHooks",
    "BenchOutcome",
    "BenchPlan",
    "BenchRunner",
    "CancelPoint",
    "CancelPolicy",
    "ClientHealth",
    "ClosedLoop",
    "Dispatcher",
    "Endpoint",
    "GateReport",
    "GateRule",
    "GateVerdict",
    "LabTruthClient",
    "LagStats",
    "LoopLagSampler",
    "Objective",
    "OpenLoop",
    "ProgressSnapshot",
    "Prompt",
    "RequestSpec",
    "RunOptions",
    "RunProgress",
    "RunResult",
    "Schedule",
    "Sent",
    "StreamClient",
    "StreamFidelity",
    "Summary",
    "SweepPlan",
    "SweepResult",
    "Ticket",
    "TokenCount",
    "TraceSchedule",
    "Workload",
    "builtin_prompts",
    "client_health",
    "compare",
    "compare_stream",
    "judge_runs",
    "lab_timeline",
    "load_run",
    "open_session",
    "parse_rules",
    "plan_bench",
    "read_prompts",
    "read_trace",
    "run_bench",
    "run_sweep",
    "summarise",
]
