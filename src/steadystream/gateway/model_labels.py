"""Which model names may become metric label values: a bounded set, one for every worker.

One ``model`` label value is repeated on every series of the model, so a client sending
random or huge model names could otherwise grow ``/metrics`` without bound. Models named in
the configuration always have a label of their own; a model an upstream actually served
(any model, for an upstream with no ``models`` list) gets one while there is room, if its
name is at most :data:`MAX_MODEL_LABEL_CHARS` long and holds no key (a client that pastes
its key as the model, and an upstream that answers any name, would otherwise show the key
to every reader of ``/metrics``); every other name is ``other``.

The workers of one gateway share the served models: a file (:data:`MODEL_LABELS`) the
parent makes in the workers' metrics folder (:func:`start_shared_models`), which they read
and add to under a lock, for the life of the gateway, so the bound holds for ``/metrics``
summed over every worker, across reloads and restarts. The file only grows: it is replaced
whole (never left half written), a name gets its label only once the file holds it, a
worker writes back every name it gave a label, and while the file is missing or cannot be
read no new name gets one.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path

import orjson

from steadystream.gateway.shared_metrics import write_whole

__all__ = [
    "MAX_MODEL_LABEL_CHARS",
    "MODEL_LABELS",
    "OTHER_MODEL",
    "ModelLabels",
    "start_shared_models",
]

OTHER_MODEL = "other"
"""The model label of every model past :attr:`LimitsConfig.max_model_labels`."""

MAX_MODEL_LABEL_CHARS = 256
"""A served model with a longer name is counted as ``other``."""

MODEL_LABELS = "models.json"
"""The served models with labels of their own, in the workers' metrics folder."""

_MAX_FILE_BYTES = 1 << 20
"""More than any file the workers write for the default limit (a name takes at most six
bytes a character in JSON); a larger limit allows proportionally more (see _read_names)."""

log = logging.getLogger("steadystream.gateway")


class ModelLabels:
    """The bounded set of model label values (see the module docstring)."""

    __slots__ = ("_full", "_known", "_limit", "_redact", "_room", "_served", "_shared", "_warned")

    def __init__(
        self, configured: list[str], limit: int, *, redact: Callable[[str], str] = str
    ) -> None:
        """``redact``: the gateway's key scrubber (:meth:`UpstreamPool.hide_keys`: keys
        only; a label's other characters are the exposition's to escape); a served name it
        changes holds a key, and is ``other``."""
        self._known = dict.fromkeys(configured)
        self._redact = redact
        self._limit = max(limit, len(self._known))
        self._room = self._limit - len(self._known)  # for served models
        self._served: list[str] = []  # served models given a label here, in order
        self._shared: Path | None = None
        self._full = self._room <= 0
        self._warned = False

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
        if self._redact(model) != model:  # a key, or a key's start
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
            names = _read_names(path, self._limit)
            if names is None:  # gone or damaged: not this worker's to shrink or restart
                self._warn(path)
                return
            # What this worker labels stays in (a file someone replaced is made whole). A
            # set, not the list: with a large limit, a scan of it per name and stream stalled
            # the loop for seconds (every served name is in _known, so model is in neither).
            there = set(names)
            grown = names + [name for name in self._served if name not in there]
            if model is not None and model not in there and len(grown) < self._room:
                grown.append(model)
            if len(grown) > len(names):
                write_whole(path, orjson.dumps(grown))
        except OSError:
            return  # (nothing given a label that the file does not hold)
        finally:
            os.close(lock)  # (and the lock with it)
        for name in grown:
            if name not in self._known:
                self._give(name)

    def _warn(self, path: Path) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "model labels: %s is missing or damaged; new model names read 'other' until"
                " the gateway restarts",
                path,
            )


def start_shared_models(path: Path) -> Path:
    """Make the empty set of served models the workers share (:meth:`ModelLabels.share`)."""
    write_whole(path, b"[]")
    return path


def _read_names(path: Path, limit: int) -> list[str] | None:
    """The names in ``path``; None when it is missing or is not what workers write."""
    most = max(_MAX_FILE_BYTES, (6 * MAX_MODEL_LABEL_CHARS + 3) * limit + 2)
    try:
        with path.open("rb") as file:
            data = file.read(most + 1)
    except OSError:
        return None
    if len(data) > most:
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
