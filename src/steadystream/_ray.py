"""Ray, the optional engine for work beyond one process: joining or starting a cluster.

Ray is an extra (``pip install 'steadystream[ray]'``). Nothing imports it until a command asks
for it, and asking without it installed is one clear error that names the extra. Where the
caller already runs inside a Ray session (``ray.init`` done), that session is used and left
running; otherwise one is opened for the work and shut down after it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from steadystream._exceptions import InputError, SteadystreamError
from steadystream.metrics import MetricConfig

__all__ = ["RAY_EXTRA", "connected", "file_failed", "import_ray", "map_files"]

RAY_EXTRA = "steadystream[ray]"
_CLIENT_SCHEME = "ray://"
_CONNECT_TIMEOUT_S = 5.0  # a cluster's head answers at once; this only bounds a dead address

T = TypeVar("T")


def import_ray() -> Any:
    """The ``ray`` module, or an error that says how to install it."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "ray":
            raise
        raise InputError(f"running on Ray needs the extra: pip install '{RAY_EXTRA}'") from exc
    return ray


@contextmanager
def connected(address: str | None = None) -> Iterator[Any]:
    """Ray, connected for the duration of the block.

    ``address`` is the cluster to join (``ray://host:10001``, ``host:6379`` or ``auto``);
    without it Ray's own rule applies: the cluster in ``RAY_ADDRESS``, else a local Ray
    started now (on all of this machine's CPUs) and stopped at the end.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield ray  # the caller's own session: theirs to shut down
        return
    # A Ray started here serves this machine alone: keep its processes on loopback rather
    # than on the host's network address. A cluster joined by address keeps its own.
    target = address or os.environ.get("RAY_ADDRESS") or None
    local = target is None
    if target is not None:
        _check_reachable(target)
    try:
        ray.init(
            address=address,
            _node_ip_address="127.0.0.1" if local else None,
            include_dashboard=False,
            # Workers' own output would land in the middle of --json on stdout; their
            # errors come back as values or as Ray's exceptions instead.
            log_to_driver=False,
            logging_level="WARNING",
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        if target is not None and target.startswith(_CLIENT_SCHEME) and "ray[client]" in str(exc):
            raise InputError(
                f"cannot join the Ray cluster at {target}: a {_CLIENT_SCHEME} address needs"
                " the Ray Client: pip install 'ray[client]'"
            ) from exc
        detail = " ".join(str(exc).split())  # Ray's messages span lines
        if target is None:
            raise SteadystreamError(f"cannot start Ray on this machine: {detail}") from exc
        raise InputError(f"cannot join the Ray cluster at {target}: {detail}") from exc
    try:
        yield ray
    finally:
        ray.shutdown()


def _check_reachable(target: str) -> None:
    """Refuse an address where nothing answers, before Ray would retry it for many minutes.

    Ray keeps trying a cluster that is not there (printing its warnings) for far longer than
    anyone waits, so the address's port is tried here first, for a few seconds. ``auto`` is
    the cluster last started on this machine, as Ray finds it; an address this cannot read
    is left for Ray to judge.
    """
    address = _auto_address() if target == "auto" else target
    if address is None or address == "local":
        return
    host, _, port = address.removeprefix(_CLIENT_SCHEME).rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(
            f"cannot join the Ray cluster at {target}: nothing answers at {host}:{port}"
            f" ({exc.strerror or exc}); is the cluster running, and is this its address?"
        ) from exc


def _auto_address() -> str | None:
    """The ``host:port`` Ray would join for ``auto``, or None to leave it to Ray."""
    try:
        from ray._private.services import canonicalize_bootstrap_address

        address: str | None = canonicalize_bootstrap_address("auto")
    except Exception:  # Ray's private helper moved or failed: ray.init says what is wrong
        return None
    return address


def file_failed(path: Path, exc: Exception) -> SteadystreamError:
    """An unexpected error from a Ray task's work on one file, as an error naming the file.

    Returned as a value like the task's own errors, it reaches the user as one line rather than
    Ray's traceback; its type and message stay in that line, so a bug is not hidden.
    """
    detail = " ".join(str(exc).split())
    return SteadystreamError(f"{path}: failed unexpectedly ({type(exc).__name__}: {detail})")


def map_files(
    work: Callable[[Path, MetricConfig], T | SteadystreamError],
    paths: Sequence[Path],
    config: MetricConfig,
    *,
    address: str | None = None,
) -> list[T]:
    """``work(path, config)`` for every path, one Ray task each, results in the paths' order.

    ``work`` returns a steadystream error rather than raising it, and the first one is raised
    here as it is. The wait is bounded by the work itself: a task whose worker or node dies is
    retried by Ray and then fails with Ray's error, so no result is waited for forever.
    """
    with connected(address) as ray:
        task = ray.remote(num_cpus=1)(work)
        results = ray.get([task.remote(path, config) for path in paths])
    for result in results:
        if isinstance(result, SteadystreamError):
            raise result
    return list(results)
