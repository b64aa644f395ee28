"""Attribution: which causes made each stall, how much of it each, how sure, and why
(docs/attribution.md).

Pure: takes timelines (any vantage points, joined by request id and wall time) and engine
metrics as numbers, returns explanations and scores. Reading files and scraping engines are
the edges' work (``steadystream.engine_metrics``, the CLI).
"""

from steadystream.attribution.causes import ATTRIBUTABLE, MITIGATIONS, UNKNOWN, Cause
from steadystream.attribution.engine import EngineSamples
from steadystream.attribution.explain import (
    AttributedStall,
    CauseShare,
    Explanation,
    HurtStream,
    explain,
)
from steadystream.attribution.scoring import NO_CAUSE, Score, score
from steadystream.attribution.shares import Share

__all__ = [
    "ATTRIBUTABLE",
    "MITIGATIONS",
    "NO_CAUSE",
    "UNKNOWN",
    "AttributedStall",
    "Cause",
    "CauseShare",
    "EngineSamples",
    "Explanation",
    "HurtStream",
    "Score",
    "Share",
    "explain",
    "score",
]
