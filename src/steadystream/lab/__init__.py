"""The lab engine: a reproducible continuous-batching LLM server whose every pause has a cause.

A streaming server (OpenAI Chat Completions and Completions, the Responses API, Anthropic
Messages) that simulates a continuous-batching engine in real time, makes each kind of pause
on demand and records the true cause of every one (docs/lab.md). Start one for a test or a
demo with :class:`LabServer`; drive the scheduler in simulated time with :class:`LabEngine`
and a :class:`~steadystream.FakeClock`.
"""

from steadystream.lab.app import LabState, create_app
from steadystream.lab.causes import Cause
from steadystream.lab.engine import LabEngine
from steadystream.lab.faults import FAULT_HEADER, FaultSpec, parse_fault_header
from steadystream.lab.metrics import LabMetrics
from steadystream.lab.presets import PRESETS, preset_lines
from steadystream.lab.scenario import Scenario
from steadystream.lab.scenario_file import load_scenario, scenario_from_mapping
from steadystream.lab.sequence import LabRequest
from steadystream.lab.server import LabServer, serve
from steadystream.lab.stream import Ending, StreamHandle
from steadystream.lab.truth import RequestTruth

__all__ = [
    "FAULT_HEADER",
    "PRESETS",
    "Cause",
    "Ending",
    "FaultSpec",
    "LabEngine",
    "LabMetrics",
    "LabRequest",
    "LabServer",
    "LabState",
    "RequestTruth",
    "Scenario",
    "StreamHandle",
    "create_app",
    "load_scenario",
    "parse_fault_header",
    "preset_lines",
    "scenario_from_mapping",
    "serve",
]
