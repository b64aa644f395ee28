"""The load generator: schedules, a faithful streaming client, runs, a release gate, sweeps.

Split as load tools are (docs/bench.md): *when* to send (:mod:`~steadystream.bench.schedule`),
*what* to send (:mod:`~steadystream.bench.workload`), *send* and record
(:mod:`~steadystream.bench.client`), *drive* a run (:mod:`~steadystream.bench.runner`,
:class:`Bench`), *judge* it (:mod:`~steadystream.bench.gate`, :mod:`~steadystream.bench.sweep`),
and check the measurement itself (:mod:`~steadystream.bench.lag`,
:mod:`~steadystream.bench.health`, :mod:`~steadystream.bench.fidelity`). Nothing here prints:
progress goes to a :class:`RunProgress`, and the CLI renders it.
"""

from steadystream.bench.cancel import CancelPoint, CancelPolicy, LabTruthClient
from steadystream.bench.client import Sent, StreamClient, open_session
from steadystream.bench.endpoint import Endpoint
from steadystream.bench.fidelity import StreamFidelity, compare_stream, lab_timeline
from steadystream.bench.gate import DEFAULT_RULES, GateReport, GateRule, compare, parse_rules
from steadystream.bench.health import ClientHealth, client_health
from steadystream.bench.lag import LAG_FLAG_NS, LagStats, LoopLagSampler
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
from steadystream.bench.sweep import DEFAULT_SLO, Objective, SweepPlan, SweepResult, run_sweep
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
    "BenchRunner",
    "CancelPoint",
    "CancelPolicy",
    "ClientHealth",
    "ClosedLoop",
    "Dispatcher",
    "Endpoint",
    "GateReport",
    "GateRule",
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
    "lab_timeline",
    "open_session",
    "parse_rules",
    "read_prompts",
    "read_trace",
    "run_sweep",
]
