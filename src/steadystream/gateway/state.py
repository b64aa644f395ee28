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

__all__ = [
    "MAX_MODEL_LABEL_CHARS",
    "OTHER_MODEL",
    "GatewayState",
    "ModelLabels",
    "labels_of",
    "start_shared_models",
]

OTHER_MODEL = "other"
"""The model label of every model past :attr:`LimitsConfig.max_model_labels`."""


class ModelLabels:
    """Which model names may become metric label values: a bounded set.

    Models named in the configuration always are; a model an upstream actually served
    (any model, for an upstream with no ``models`` list) joins while there is room, if its
    name is at most :data:`MAX_MODEL_LABEL_CHARS` long. Every other name folds into
    ``other``, so a client sending random or huge model names cannot grow ``/metrics``
    without bound.

    The workers of one gateway share the served models (:meth:`share`): a file the parent
    makes (:func:`start_shared_models`) and they all read and add to under a lock, kept with
    their metrics for the life of the gateway, so the bound holds for ``/metrics`` summed
    over every worker, across reloads and restarts. The file only grows: it is replaced
    whole (never left half written), a worker writes back every name it gave a label, and
    while it is missing or cannot be read no new name gets one.
    """

    __slots__ = ("_full", "_known", "_limit", "_room", "_served", "_shared")

    def __init__(self, configured: list[str], limit: int) -> None:
        self._known = dict.fromkeys(configured)
        self._limit = max(limit, len(self._known))
        self._room = self._limit - len(self._known)  # for served models
        self._served: list[str] = []  # served models this process gave a label, in order
        self._shared: Path | None = None
        self._full = False

    def share(self, path: Path) -> None:
        """Join the served models of every worker, kept in ``path`` (made by the parent)."""
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
        else:
            self._give(model)

    def _give(self, model: str) -> None:
        if model not in self._known and len(self._served) < self._room:
            self._known[model] = None
            self._served.append(model)
        self._full = len(self._served) >= self._room

    def _join(self, model: str | None) -> None:
        # Another worker holding the lock (for microseconds) is not waited for: the name
        # waits for its next stream. Once the shared set is full it never changes again.
        path = self._shared
        assert path is not None
        try:
            lock = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            names = _read_names(path, self._room)
            if names is None:  # gone or damaged: not this worker's to shrink or restart
                return
            # What this worker labels stays in (a file someone replaced is made whole).
            grown = names + [name for name in self._served if name not in names]
            for name in grown:
                self._give(name)
            if model is not None and model not in grown and not self._full:
                self._give(model)
                grown.append(model)
            if len(grown) > len(names):
                _replace(path, orjson.dumps(grown))
        except OSError:
            return
        finally:
            os.close(lock)  # (and the lock with it)


MAX_MODEL_LABEL_CHARS = 256
"""A served model with a longer name is counted as ``other``: one label value is repeated
on every series of the model, so one huge name would make every scrape huge."""


def start_shared_models(path: Path) -> Path:
    """Make the empty set of served models the workers share (:meth:`ModelLabels.share`)."""
    _replace(path, b"[]")
    return path


def _read_names(path: Path, room: int) -> list[str] | None:
    """The names in ``path``; None when it is missing or is not what workers write."""
    try:
        with path.open("rb") as file:
            data = file.read((MAX_MODEL_LABEL_CHARS + 8) * room + 2 + 1)
    except OSError:
        return None
    if len(data) > (MAX_MODEL_LABEL_CHARS + 8) * room + 2:
        return None
    try:
        names = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(names, list) or not all(
        isinstance(n, str) and len(n) <= MAX_MODEL_LABEL_CHARS for n in names
    ):
        return None
    return names


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (a reader sees the old file or the new one)."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


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
