"""steadystream: see and fix the stutter in LLM token streams.

The whole public API is here, in one flat namespace (httpx's way); nothing else is promised.
Names load on first use (PEP 562), so ``import steadystream`` and every command's ``--help``
stay fast however much is behind them::

    import steadystream as ss

    run = ss.read_timelines("run.jsonl").timelines          # timelines in and out
    ss.fleet_metrics(run).p99_of_worst_gap_s                # stream and fleet metrics
    ss.analyze_files(["runs/"], ss.MetricConfig())          # whole folders, Ray optional
    ss.explain(run).by_cause                                # which causes made each stall
    outcome = await ss.run_bench(ss.BenchConfig(url=..., model="lab"))   # a load test
    with ss.LabServer("steady") as lab, ss.GatewayServer(
        ss.config_from_upstreams([lab.base_url])
    ) as gateway: ...                                       # servers on free loopback ports

By area: the data model (:class:`Timeline`, :class:`Event`, the kinds and outcomes), files,
metrics, analysis and attribution, the load test, the gateway, the lab, replay, pacing,
reports, clocks, and one error hierarchy under :class:`SteadystreamError`. Each name's home
module is in ``_HOMES`` below; the names there are the API, whatever module holds them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from steadystream.__about__ import __version__

# Where each public name lives: (module, name there). Aliases give servers' factories their
# own names where several packages use the same one (create_app, serve, load_config).
_HOMES: dict[str, tuple[str, str]] = {
    # the data model
    "SCHEMA": ("steadystream.timeline", "SCHEMA"),
    "Event": ("steadystream._types", "Event"),
    "EventKind": ("steadystream._types", "EventKind"),
    "Outcome": ("steadystream._types", "Outcome"),
    "Timeline": ("steadystream.timeline", "Timeline"),
    "TokenSource": ("steadystream._types", "TokenSource"),
    "Where": ("steadystream._types", "Where"),
    # clocks
    "Clock": ("steadystream._clock", "Clock"),
    "FakeClock": ("steadystream._clock", "FakeClock"),
    "MonotonicClock": ("steadystream._clock", "MonotonicClock"),
    # errors
    "BrowserError": ("steadystream._exceptions", "BrowserError"),
    "ConfigError": ("steadystream._exceptions", "ConfigError"),
    "InputError": ("steadystream._exceptions", "InputError"),
    "ProtocolError": ("steadystream._exceptions", "ProtocolError"),
    "SpecError": ("steadystream._exceptions", "SpecError"),
    "SteadystreamError": ("steadystream._exceptions", "SteadystreamError"),
    "TimelineFormatError": ("steadystream._exceptions", "TimelineFormatError"),
    "UpstreamConnectError": ("steadystream._exceptions", "UpstreamConnectError"),
    "UpstreamError": ("steadystream._exceptions", "UpstreamError"),
    "UpstreamStatusError": ("steadystream._exceptions", "UpstreamStatusError"),
    "UpstreamStreamError": ("steadystream._exceptions", "UpstreamStreamError"),
    "UpstreamTimeoutError": ("steadystream._exceptions", "UpstreamTimeoutError"),
    # files
    "JsonlWriter": ("steadystream.files", "JsonlWriter"),
    "read_timelines": ("steadystream.files", "read_timelines"),
    "write_timelines": ("steadystream.files", "write_timelines"),
    # metrics
    "FleetMetrics": ("steadystream.metrics", "FleetMetrics"),
    "MetricConfig": ("steadystream.metrics", "MetricConfig"),
    "StreamMetrics": ("steadystream.metrics", "StreamMetrics"),
    "fleet_metrics": ("steadystream.metrics", "fleet_metrics"),
    "stream_metrics": ("steadystream.metrics", "stream_metrics"),
    "stream_table": ("steadystream.metrics", "stream_table"),
    # analysis and attribution
    "Explanation": ("steadystream.attribution", "Explanation"),
    "analyze_files": ("steadystream.analysis", "analyze_files"),
    "explain": ("steadystream.attribution", "explain"),
    "explain_files": ("steadystream.explanations", "explain_files"),
    # the load test
    "Bench": ("steadystream.bench", "Bench"),
    "BenchConfig": ("steadystream.bench", "BenchConfig"),
    "BenchOutcome": ("steadystream.bench", "BenchOutcome"),
    "ClosedLoop": ("steadystream.bench", "ClosedLoop"),
    "Endpoint": ("steadystream.bench", "Endpoint"),
    "OpenLoop": ("steadystream.bench", "OpenLoop"),
    "RunOptions": ("steadystream.bench", "RunOptions"),
    "Workload": ("steadystream.bench", "Workload"),
    "builtin_prompts": ("steadystream.bench", "builtin_prompts"),
    "run_bench": ("steadystream.bench", "run_bench"),
    "BenchSettings": ("steadystream.bench.session", "BenchSettings"),
    "RayBench": ("steadystream.bench.distributed", "RayBench"),
    # the gateway
    "GatewayConfig": ("steadystream.gateway", "GatewayConfig"),
    "GatewayServer": ("steadystream.gateway", "GatewayServer"),
    "config_from_mapping": ("steadystream.gateway", "config_from_mapping"),
    "config_from_upstreams": ("steadystream.gateway", "config_from_upstreams"),
    "create_gateway_app": ("steadystream.gateway", "create_app"),
    "load_gateway_config": ("steadystream.gateway", "load_config"),
    "serve_gateway": ("steadystream.gateway", "serve"),
    # the lab
    "LabServer": ("steadystream.lab", "LabServer"),
    "Scenario": ("steadystream.lab", "Scenario"),
    "create_lab_app": ("steadystream.lab", "create_app"),
    "serve_lab": ("steadystream.lab", "serve"),
    # replay
    "ReplayServer": ("steadystream.replay", "ReplayServer"),
    "create_replay_app": ("steadystream.replay", "create_app"),
    "inject_faults": ("steadystream.replay.inject", "inject"),
    "parse_injection": ("steadystream.replay", "parse_injection"),
    # pacing
    "Pacer": ("steadystream.shaping", "Pacer"),
    "pace": ("steadystream.shaping", "pace"),
    "parse_pacer": ("steadystream.shaping", "parse_spec"),
    "simulate": ("steadystream.shaping", "simulate"),
    "what_if": ("steadystream.shaping", "what_if"),
    # reports
    "build_report": ("steadystream.report", "build_report"),
    "write_report": ("steadystream.report", "write_report"),
    "write_images": ("steadystream.report.images", "write_images"),
    "screenshot": ("steadystream.report.images", "screenshot"),
}

__all__ = [
    "SCHEMA",
    "Bench",
    "BenchConfig",
    "BenchOutcome",
    "BenchSettings",
    "BrowserError",
    "Clock",
    "ClosedLoop",
    "ConfigError",
    "Endpoint",
    "Event",
    "EventKind",
    "Explanation",
    "FakeClock",
    "FleetMetrics",
    "GatewayConfig",
    "GatewayServer",
    "InputError",
    "JsonlWriter",
    "LabServer",
    "MetricConfig",
    "MonotonicClock",
    "OpenLoop",
    "Outcome",
    "Pacer",
    "ProtocolError",
    "RayBench",
    "ReplayServer",
    "RunOptions",
    "Scenario",
    "SpecError",
    "SteadystreamError",
    "StreamMetrics",
    "Timeline",
    "TimelineFormatError",
    "TokenSource",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamStatusError",
    "UpstreamStreamError",
    "UpstreamTimeoutError",
    "Where",
    "Workload",
    "__version__",
    "analyze_files",
    "build_report",
    "builtin_prompts",
    "config_from_mapping",
    "config_from_upstreams",
    "create_gateway_app",
    "create_lab_app",
    "create_replay_app",
    "explain",
    "explain_files",
    "fleet_metrics",
    "inject_faults",
    "load_gateway_config",
    "pace",
    "parse_injection",
    "parse_pacer",
    "read_timelines",
    "run_bench",
    "screenshot",
    "serve_gateway",
    "serve_lab",
    "simulate",
    "stream_metrics",
    "stream_table",
    "what_if",
    "write_images",
    "write_report",
    "write_timelines",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__
    from steadystream._clock import Clock, FakeClock, MonotonicClock
    from steadystream._exceptions import (
        BrowserError,
        ConfigError,
        InputError,
        ProtocolError,
        SpecError,
        SteadystreamError,
        TimelineFormatError,
        UpstreamConnectError,
        UpstreamError,
        UpstreamStatusError,
        UpstreamStreamError,
        UpstreamTimeoutError,
    )
    from steadystream._types import Event, EventKind, Outcome, TokenSource, Where
    from steadystream.analysis import analyze_files
    from steadystream.attribution import Explanation, explain
    from steadystream.bench import (
        Bench,
        BenchConfig,
        BenchOutcome,
        ClosedLoop,
        Endpoint,
        OpenLoop,
        RunOptions,
        Workload,
        builtin_prompts,
        run_bench,
    )
    from steadystream.bench.distributed import RayBench
    from steadystream.bench.session import BenchSettings
    from steadystream.explanations import explain_files
    from steadystream.files import JsonlWriter, read_timelines, write_timelines
    from steadystream.gateway import (
        GatewayConfig,
        GatewayServer,
        config_from_mapping,
        config_from_upstreams,
    )
    from steadystream.gateway import create_app as create_gateway_app
    from steadystream.gateway import load_config as load_gateway_config
    from steadystream.gateway import serve as serve_gateway
    from steadystream.lab import LabServer, Scenario
    from steadystream.lab import create_app as create_lab_app
    from steadystream.lab import serve as serve_lab
    from steadystream.metrics import (
        FleetMetrics,
        MetricConfig,
        StreamMetrics,
        fleet_metrics,
        stream_metrics,
        stream_table,
    )
    from steadystream.replay import ReplayServer, parse_injection
    from steadystream.replay import create_app as create_replay_app
    from steadystream.replay.inject import inject as inject_faults
    from steadystream.report import build_report, write_report
    from steadystream.report.images import screenshot, write_images
    from steadystream.shaping import Pacer, pace, simulate, what_if
    from steadystream.shaping import parse_spec as parse_pacer
    from steadystream.timeline import SCHEMA, Timeline


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'steadystream' has no attribute {name!r}")
    module, attribute = home
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # the next use costs nothing
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
