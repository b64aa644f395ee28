"""The public face is one flat namespace, pinned: every name exists, and nothing else is promised.

A name added to or taken from ``steadystream.__all__`` is a change of the public API; this
test makes it a deliberate one (httpx's tests/test_exported_members.py).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import steadystream
from steadystream import metrics

PUBLIC_API = sorted(
    [
        *("SCHEMA", "__version__"),
        # the data model, clocks and errors
        *("Event", "EventKind", "Outcome", "Timeline", "TokenSource", "Where"),
        *("Clock", "FakeClock", "MonotonicClock"),
        *("BrowserError", "ConfigError", "InputError", "ProtocolError", "SpecError"),
        *("SteadystreamError", "TimelineFormatError", "UpstreamConnectError", "UpstreamError"),
        *("UpstreamStatusError", "UpstreamStreamError", "UpstreamTimeoutError"),
        # files, metrics, analysis
        *("JsonlWriter", "read_timelines", "write_timelines"),
        *("FleetMetrics", "MetricConfig", "StreamMetrics", "fleet_metrics", "stream_metrics"),
        *("stream_table", "Explanation", "analyze_files", "explain", "explain_files"),
        # the load test
        *("Bench", "BenchConfig", "BenchOutcome", "ClosedLoop", "Endpoint", "OpenLoop"),
        *("RunOptions", "Workload", "builtin_prompts", "run_bench", "BenchSettings", "RayBench"),
        # servers: the gateway, the lab, replay
        *("GatewayConfig", "GatewayServer", "config_from_mapping", "config_from_upstreams"),
        *("create_gateway_app", "load_gateway_config", "serve_gateway"),
        *("LabServer", "Scenario", "create_lab_app", "serve_lab"),
        *("ReplayServer", "create_replay_app", "inject_faults", "parse_injection"),
        # pacing and reports
        *("Pacer", "pace", "parse_pacer", "simulate", "what_if", "build_report", "write_report"),
        *("write_images", "screenshot"),
    ]
)


def test_the_public_api_is_pinned_sorted_and_every_name_exists() -> None:
    assert sorted(steadystream.__all__) == PUBLIC_API
    assert len(set(steadystream.__all__)) == len(steadystream.__all__)  # order: ruff RUF022
    for name in steadystream.__all__:
        assert getattr(steadystream, name) is not None, name
    assert set(steadystream.__all__) <= set(dir(steadystream))
    assert all(hasattr(metrics, name) for name in metrics.__all__)


def test_public_names_are_exported() -> None:
    exported = set(steadystream.__all__)
    public = {
        name
        for name, value in vars(steadystream).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("steadystream")
    }
    assert public <= exported, public - exported


def test_an_unknown_name_says_so() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        steadystream.no_such_thing  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_package_loads_no_server_and_no_heavy_dependency() -> None:
    # Names load on first use: `import steadystream` (and every command's --help) stays light.
    code = (
        "import sys, steadystream; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('uvicorn', 'starlette', 'aiohttp', 'plotly', 'numpy', 'ray') "
        "or m.startswith(('steadystream.gateway', 'steadystream.bench'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_no_public_name_is_also_a_module_of_the_package() -> None:
    # Importing a submodule sets the package's attribute of its name: a public function of
    # the same name would turn into the module once anything imported it.
    for name in steadystream.__all__:
        assert importlib.util.find_spec(f"steadystream.{name}") is None, name
