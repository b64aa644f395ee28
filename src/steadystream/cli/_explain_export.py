"""``explain``'s exports: stall time by cause to a Prometheus text file and over OTLP.

The file follows node_exporter's textfile-collector convention: written whole to a temporary
file beside it, then renamed over it, so a scrape never reads half of it. OTLP is on when the
standard ``OTEL_*`` environment says so (``OTEL_EXPORTER_OTLP_ENDPOINT``, and
``OTEL_SDK_DISABLED`` not ``true``); only then is OpenTelemetry imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from steadystream._exceptions import InputError
from steadystream.attribution.export import (
    CAUSE_ATTRIBUTE,
    STALL_TIME_METRIC,
    CauseTotal,
    StallCollector,
)

if TYPE_CHECKING:
    from steadystream.otel.sdk import OtelExporter

__all__ = ["export_otel", "record_stall_time", "write_prometheus"]


def write_prometheus(path: Path, totals: list[CauseTotal]) -> None:
    """Write the totals to ``path`` in the Prometheus text format (temporary file, rename)."""
    from prometheus_client import CollectorRegistry, write_to_textfile

    if not path.parent.is_dir():
        raise InputError(f"--prometheus: no folder {str(path.parent)!r} to write {path.name} in")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StallCollector(totals))
    try:
        write_to_textfile(str(path), registry)
    except OSError as exc:
        raise InputError(f"--prometheus: cannot write {str(path)!r}: {exc.strerror}") from exc


def export_otel(env: Mapping[str, str], totals: list[CauseTotal]) -> bool:
    """Send the totals over OTLP when the ``OTEL_*`` environment turns it on; whether it did."""
    from steadystream.otel import open_exporter, resolve_settings

    settings = resolve_settings(env, default_service="steadystream-explain")
    if settings is None or not settings.metrics:  # explain makes no spans
        return False
    exporter = open_exporter(settings)
    try:
        record_stall_time(exporter, totals)
    finally:
        exporter.shutdown()  # exports what was recorded, then stops the exporters' threads
    return True


def record_stall_time(exporter: OtelExporter, totals: list[CauseTotal]) -> None:
    """Add each cause's stall time to the ``steadystream.stall.time`` counter."""
    from steadystream.__about__ import __version__

    meter = exporter.meter_provider.get_meter("steadystream", __version__)
    counter = meter.create_counter(
        STALL_TIME_METRIC, "s", "Stall time by cause, from each stall's shares (explain)."
    )
    for total in totals:
        counter.add(total.seconds, {CAUSE_ATTRIBUTE: total.cause})
