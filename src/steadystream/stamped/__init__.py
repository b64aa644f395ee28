"""Streamed HTTP/1.1 responses stamped on arrival: kernel receive stamps where Linux gives them.

The edge that reads token streams for the bench client and the gateway's upstream side
(docs/bench.md, "How arrivals are stamped"). aiohttp stays for calls that need no stamps.
"""

from steadystream.stamped.connection import StampedConnection, connection_type
from steadystream.stamped.kernel import kernel_stamps_available
from steadystream.stamped.modes import STAMP_CHOICES, StampMode, resolve_stamps
from steadystream.stamped.rescue import StallRescuer
from steadystream.stamped.target import ResponseHead, Target

__all__ = [
    "STAMP_CHOICES",
    "ResponseHead",
    "StallRescuer",
    "StampMode",
    "StampedConnection",
    "Target",
    "connection_type",
    "kernel_stamps_available",
    "resolve_stamps",
]
