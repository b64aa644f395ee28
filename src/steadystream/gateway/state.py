"""What every request handler shares: configuration, upstreams, clock, metrics, recorder."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from starlette.types import Scope, Send

from steadystream._clock import Clock
from steadystream.gateway.auth import Authenticator
from steadystream.gateway.config import GatewayConfig
from steadystream.gateway.export import GatewayMetrics, StreamLabels
from steadystream.gateway.later import AfterWrites
from steadystream.gateway.recording import StreamRecord, TimelineSink
from steadystream.gateway.upstreams import UpstreamPool

__all__ = ["MAX_MODEL_LABEL_CHARS", "OTHER_MODEL", "GatewayState", "ModelLabels", "labels_of"]

OTHER_MODEL = "other"
"""The model label of every model past :attr:`LimitsConfig.max_model_labels`."""


class ModelLabels:
    """Which model names may become metric label values: a bounded set.

    Models named in the configuration always are; a model an upstream actually served
    (any model, for an upstream with no ``models`` list) joins while there is room, if its
    name is at most :data:`MAX_MODEL_LABEL_CHARS` long. Every other name folds into
    ``other``, so a client sending random or huge model names cannot grow ``/metrics``
    without bound.

    The workers of one gateway share the served models (:meth:`share`): a file they all
    read and add to under a lock, kept with their metrics for the life of the gateway, so
    the bound holds for ``/metrics`` summed over every worker, across reloads and restarts.
    """

    __slots__ = ("_full", "_known", "_limit", "_room", "_shared")

    def __init__(self, configured: list[str], limit: int) -> None:
        self._known = dict.fromkeys(configured)
        self._limit = max(limit, len(self._known))
        self._room = self._limit - len(self._known)  # for served models
        self._shared: Path | None = None
        self._full = False

    def share(self, path: Path) -> None:
        """Join the served models of every worker kept in ``path`` (created if missing)."""
        self._shared = path
        self._join(None)

    def label(self, model: str) -> str:
        return model if model in self._known else OTHER_MODEL

    def served(self, model: str) -> None:
        """An upstream answered for ``model``: it may have a label of its own."""
        if model in self._known or len(model) > MAX_MODEL_LABEL_CHARS or self._full:
            return
        if self._shared is not None:
            self._join(model)
        elif len(self._known) < self._limit:
            self._known[model] = None
        else:
            self._full = True

    def _join(self, model: str | None) -> None:
        # Another worker holding the lock (for microseconds) is not waited for: the name
        # waits for its next stream. Once the shared set is full it never changes again.
        assert self._shared is not None
        try:
            fd = os.open(self._shared, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            names = _read_names(fd)
            if model is not None and model not in names and len(names) < self._room:
                names.append(model)
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, orjson.dumps(names))
        except OSError:
            return
        finally:
            os.close(fd)  # (and the lock with it)
        for name in names[: self._room]:
            self._known.setdefault(name)
        self._full = len(names) >= self._room


MAX_MODEL_LABEL_CHARS = 256
"""A served model with a longer name is counted as ``other``: one label value is repeated
on every series of the model, so one huge name would make every scrape huge."""


def _read_names(fd: int) -> list[str]:
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
        if len(data) > 1 << 22:  # no honest set is this large (256 chars x the limit)
            return []
    try:
        names = orjson.loads(data) if data else []
    except orjson.JSONDecodeError:
        return []
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and len(n) <= MAX_MODEL_LABEL_CHARS]


log = logging.getLogger("steadystream.gateway")


@dataclass(eq=False)
class GatewayState:
    config: GatewayConfig
    auth: Authenticator
    pool: UpstreamPool
    clock: Clock
    metrics: GatewayMetrics
    recorder: TimelineSink | None = None
    log: logging.Logger = field(default=log)
    model_labels: ModelLabels = field(default_factory=lambda: ModelLabels([], 100))
    transport_of: Callable[[Scope, Send], asyncio.WriteTransport | None] | None = None
    """The client connection of a request, when the server that runs the app can tell
    (``GatewayServer`` and ``serve`` can): the relay sends without a hop through its buffer
    while the connection's write buffer is empty, and drops a stuck client's connection."""
    after_writes: AfterWrites = field(default_factory=AfterWrites)
    """The express lane's bookkeeping, run after each pass over the reads (one per loop)."""
    writes_chunks: Callable[[Scope, Send], bool] | None = None
    """Whether the server frames a started response in chunks that the relay may also write
    to the connection itself (uvicorn's httptools protocol): the express lane."""

    def finish_record(self, record: StreamRecord, end_ns: int) -> None:
        """Build a finished request's timelines, observe them, and record them."""
        up, down = record.timelines(
            end_ns, keep_text=self.config.recording.keep_text, redact=self.pool.redact
        )
        labels = labels_of(record, self.model_labels)
        duration = (end_ns - record.received_ns) / 1e9
        self.metrics.observe_stream(labels, (up, down), duration_s=duration)
        self.metrics.streams.labels(*labels, record.outcome.value).inc()
        if self.recorder is not None:
            try:
                self.recorder.write((up, down))
            except OSError as exc:  # a full disk must not take the stream down with it
                self.log.error("recording failed: %s", exc)


def labels_of(record: StreamRecord, models: ModelLabels) -> StreamLabels:
    """A request's metric labels, its model folded into a bounded set."""
    labels = record.labels
    return (
        models.label(labels.get("model", "")),
        labels.get("route", ""),
        labels.get("tenant", ""),
        labels.get("upstream", "none"),
    )
