"""One hand-rolled Prometheus histogram, for the servers that observe faster than a lock allows.

prometheus_client's ``Histogram`` takes a lock and walks its buckets on every ``observe``.
The lab observes once per SSE event it writes, and the gateway observes every gap of a
stream at once when it ends, so both keep their buckets here instead: a scalar observation
is one ``bisect`` and one list increment, an array of them one ``searchsorted`` and one
``bincount``. Both run on one event-loop thread, so no lock is needed; a scrape that
renders on another thread collects a copy taken on the loop (:meth:`Histograms.frozen`).
:class:`Histograms` exposes any number of them through a registry passed in (never the
global one). Buckets are validated as client_python's are: strictly increasing, or a
``ValueError``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["FastHistogram", "HistogramSeries", "Histograms"]


class HistogramSeries:
    """The counts of one label set: ``observe`` is cheap enough to call per event."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds  # finite upper bounds; the last count is +Inf's
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": bisect_left puts v == bound in it.
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value

    def observe_many(self, values: npt.NDArray[np.float64]) -> None:
        found = np.searchsorted(np.asarray(self._bounds), values, side="left")
        added = np.bincount(found, minlength=len(self.counts))
        self.counts = [a + int(b) for a, b in zip(self.counts, added, strict=True)]
        self.total += float(values.sum())

    @property
    def count(self) -> int:
        return sum(self.counts)

    def copy(self) -> HistogramSeries:
        copied = HistogramSeries(self._bounds)
        copied.counts = list(self.counts)
        copied.total = self.total
        return copied


class FastHistogram:
    """A labelled histogram whose series are :class:`HistogramSeries`."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        bounds = tuple(float(b) for b in buckets if not math.isinf(b))
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must be strictly increasing")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self._series: dict[tuple[str, ...], HistogramSeries] = {}

    def labels(self, *values: str) -> HistogramSeries:
        """The series of one label set, made on first use."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = HistogramSeries(self.bounds)
        return series

    def observe(self, labels: tuple[str, ...], values: npt.ArrayLike) -> None:
        """Observe one value or an array of them (NaN, a metric that has no value, is skipped)."""
        array = np.atleast_1d(np.asarray(values, dtype=np.float64))
        array = array[~np.isnan(array)]
        if len(array):
            self.labels(*labels).observe_many(array)

    def frozen(self) -> FastHistogram:
        """A copy of every series as of now (a list copy each): collected on another thread
        while this one goes on observing."""
        copy = FastHistogram(self.name, self.documentation, self.labelnames, self.bounds)
        copy._series = {labels: series.copy() for labels, series in self._series.items()}
        return copy

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = [repr(b) for b in self.bounds] + ["+Inf"]
        for labels, series in self._series.items():
            cumulative = 0
            buckets = []
            for edge, count in zip(edges, series.counts, strict=True):
                cumulative += count
                buckets.append((edge, float(cumulative)))
            family.add_metric(list(labels), buckets, series.total)
        return family


class Histograms(Collector):
    """Exposes histograms through a registry: ``registry.register(Histograms([...]))``."""

    def __init__(
        self,
        histograms: Sequence[FastHistogram],
        *,
        before_collect: Callable[[], None] | None = None,
    ) -> None:
        self.histograms = list(histograms)
        self._before_collect = before_collect  # brings batched observations in

    def frozen(self) -> Histograms:
        """Every histogram as of now (:meth:`FastHistogram.frozen`), batched observations
        brought in first: the copy another thread may collect. Turning thousands of series
        into samples takes long enough to stall the loop they are observed on; the copy
        takes a list copy per series."""
        if self._before_collect is not None:
            self._before_collect()
        return Histograms([histogram.frozen() for histogram in self.histograms])

    def collect(self) -> Iterator[Metric]:
        if self._before_collect is not None:
            self._before_collect()
        for histogram in self.histograms:
            yield histogram.collect()
