"""Per-stream and fleet metrics of stream timelines: pure numpy, no I/O.

Every metric is defined once, with its formula, in docs/metrics.md. The two headline numbers
of a fleet are ``p99_of_p99_s`` (the tail of per-stream p99 gaps) and ``p99_of_worst_gap_s``
(the tail of per-stream worst gaps: the freezes people watched). Report both: in a 200-token
stream one 2 s freeze is one gap in 199, above the 99th percentile, so a stream's p99 can stay
at 20 ms while its worst gap is 2 s.

    >>> table = stream_table(timelines)          # one row per stream, NaN = undefined
    >>> stream_metrics(timelines[0]).max_gap_s   # one stream, None = undefined
    >>> fleet_metrics(table).p99_of_worst_gap_s  # the fleet
    >>> FLEET_CATALOGUE["goodput"].show(0.875)   # '87.5%': how every view shows it
"""

from steadystream.metrics._catalogue import (
    FLEET_CATALOGUE,
    RUN_SETTINGS,
    MetricInfo,
    find_fleet_metric,
)
from steadystream.metrics._config import MetricConfig
from steadystream.metrics._fleet import (
    LABEL_DIMENSIONS,
    FleetMetrics,
    TtftGroup,
    fleet_metrics,
    worst_streams,
)
from steadystream.metrics._per_stream import (
    ARRIVAL_WINDOW_NS,
    STREAM_COLUMNS,
    StreamMetrics,
    StreamTable,
    stream_metrics,
    stream_table,
)

__all__ = [
    "ARRIVAL_WINDOW_NS",
    "FLEET_CATALOGUE",
    "LABEL_DIMENSIONS",
    "RUN_SETTINGS",
    "STREAM_COLUMNS",
    "FleetMetrics",
    "MetricConfig",
    "MetricInfo",
    "StreamMetrics",
    "StreamTable",
    "TtftGroup",
    "find_fleet_metric",
    "fleet_metrics",
    "stream_metrics",
    "stream_table",
    "worst_streams",
]
