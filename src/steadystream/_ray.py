"""Ray, the optional engine for work beyond one process: joining or starting a cluster.

Ray is an extra (``pip install 'steadystream[ray]'``). Nothing imports it until a command asks
for it, and asking without it installed is one clear error that names the extra. Where the
caller already runs inside a Ray session (``ray.init`` done), that session is used and left
running; otherwise one is opened for the work and shut down after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from steadystream._exceptions import InputError, SteadystreamError
from steadystream.metrics import MetricConfig

__all__ = ["RAY_EXTRA", "connected", "import_ray", "map_files"]

RAY_EXTRA = "steadystream[ray]"

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
    local = address is None and not os.environ.get("RAY_ADDRESS")
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
    except ConnectionError as exc:
        raise InputError(
            f"cannot join the Ray cluster at {address or 'RAY_ADDRESS'}: {exc}"
        ) from exc
    try:
        yield ray
    finally:
        ray.shutdown()


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
