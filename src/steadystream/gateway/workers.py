"""The gateway on every core: worker processes sharing one port, and the parent that keeps them.

One gateway process relays on one core (docs/performance.md has the scaling model). With
``server.workers: N`` the parent binds the port, then forks N workers; each builds its own app
after the fork (its own event loop, upstream connections, recorder and metrics) and accepts
on the shared socket, so the kernel hands each new connection to one of them. Nothing on the
hot path is shared:

- **recordings**: each worker writes its own files (``gateway-DATE-PID-NNNN.jsonl``), so no two
  processes ever write one file and no line is ever interleaved;
- **metrics**: each worker publishes a snapshot once a second and any worker answers
  ``/metrics`` with the sum of all (:mod:`steadystream.gateway.shared_metrics`).

One thing is made once, in the parent, for all: the glass token secret (unless
``glass.secret_env`` names one), so that a page's report may reach another worker than the
one that served its answer, also across reloads.

Signals to the parent: SIGTERM or SIGINT stops every worker (each lets its streams finish for
uvicorn's graceful-shutdown time) and then the parent; SIGHUP reloads: the configuration is
read again and checked as a start would (a key whose variable is not set refuses it), and the
workers are replaced one at a time, the new one started before the old one stops, so the port
keeps answering; ``server.workers`` may change, the address and port cannot (the socket is the
parent's). A refused configuration is reported and the old workers stay. A worker that dies
on its own is replaced, at most once a second; a parent that dies takes its workers with it
(the kernel sends each a SIGTERM), so none serves on orphaned.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steadystream._exceptions import ConfigError, SteadystreamError
from steadystream.gateway.config import GatewayConfig
from steadystream.gateway.glass import glass_secret
from steadystream.gateway.model_labels import MODEL_LABELS, start_shared_models
from steadystream.gateway.shared_metrics import PUBLISH_EVERY_S, Retired, SharedMetrics

__all__ = ["serve_workers"]

_PR_SET_PDEATHSIG = 1  # prctl(2)
_STOP_GRACE_S = 10.0  # uvicorn's graceful shutdown, and then some, before SIGKILL
_RESTART_EVERY_S = 1.0
# A worker that dies this soon after it started died starting; this many in a row and the
# gateway stops, saying so, rather than accept connections that nobody answers forever.
_DIED_STARTING_S = 5.0
_GIVE_UP_AFTER = 10
_TICK_S = 0.2
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # the parent's; the workers' default


ServeOn = Callable[..., None]
"""How one worker serves its app on the socket (``steadystream.gateway.server.serve_on``)."""


def serve_workers(
    config: GatewayConfig,
    sock: socket.socket,
    serve_on: ServeOn,
    *,
    log_level: str = "info",
    reload: Callable[[], GatewayConfig] | None = None,
) -> None:
    """Run ``config.server.worker_count`` workers on ``sock`` until SIGTERM or SIGINT."""
    folder: Path | None = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="steadystream-gateway-metrics-"))
        start_shared_models(folder / MODEL_LABELS)
    except OSError as exc:
        sock.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise ConfigError(
            "server.workers: the workers share their metrics through a temporary directory, "
            f"and none can be made (set TMPDIR to a writable one): {exc}"
        ) from exc
    try:
        _Supervisor(config, sock, folder, log_level, reload, serve_on).run()
    finally:
        sock.close()
        shutil.rmtree(folder, ignore_errors=True)


class _Supervisor:
    def __init__(
        self,
        config: GatewayConfig,
        sock: socket.socket,
        folder: Path,
        log_level: str,
        reload: Callable[[], GatewayConfig] | None,
        serve_on: ServeOn,
    ) -> None:
        self.config = config
        self.serve_on = serve_on
        self.sock = sock
        self.folder = folder
        self.log_level = log_level
        self.reload = reload
        self.workers: list[int] = []
        self.retired = Retired(folder)
        self._retired_lost = False  # that retired.json could not be written again (said once)
        self.glass_secret = glass_secret()
        self._stopping = False
        self._reloading = False
        self._last_restart = 0.0
        self._started: dict[int, float] = {}  # worker pid -> when it was forked
        self._died_starting = 0  # workers in a row that died as they started

    def run(self) -> None:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _SIGNALS}
        try:
            self.workers = [
                self._spawn(self.config) for _ in range(self.config.server.worker_count)
            ]
            _say(f"{len(self.workers)} workers: pids {', '.join(map(str, self.workers))}")
            while not self._stopping:
                if self._reloading:
                    self._reloading = False
                    self._reload()
                self._replace_dead()
                self._keep_retired()
                time.sleep(_TICK_S)
        finally:
            self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reloading = True
        else:
            self._stopping = True

    def _spawn(self, config: GatewayConfig) -> int:
        parent = os.getpid()
        # The signals wait while a worker is forked: one that reached the child before it
        # dropped this parent's handlers would only set a flag there (or, before Python's
        # fork returns, be lost), and a worker asked to stop would serve on until SIGKILL.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            raise
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._started[pid] = time.monotonic()
            return pid
        code = 0
        try:
            for sig in _SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what came meanwhile ends it
            _end_with(parent)
            _worker(
                config, self.sock, self.folder, self.log_level, self.serve_on, self.glass_secret
            )
        except BaseException:  # a child must never return into the parent's code
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _reload(self) -> None:
        config = self.config
        if self.reload is not None:
            try:
                config = self.reload()
                _startable(config)
            except Exception as exc:
                # Whatever fails, a reload never ends a serving gateway: reading the file
                # may fail in ways nobody mapped to a SteadystreamError (its folder made
                # unreadable: a PermissionError), and the workers keep serving all the same.
                said = exc if isinstance(exc, SteadystreamError) else f"{type(exc).__name__}: {exc}"
                _say(f"reload refused, the workers keep the old configuration: {said}")
                return
        then, now = self.config.server, config.server
        sent_then = self.config.limits.client_send_buffer
        if sent_then != config.limits.client_send_buffer:
            _say(
                f"limits.client_send_buffer stays {sent_then} on a reload (it is set on the "
                "listening socket, this process's): restart the gateway to change it"
            )
        if (then.host, then.port) != (now.host, now.port):
            _say(
                f"server.host and server.port stay {then.host}:{then.port} on a reload (the "
                "socket is this process's): restart the gateway to move it"
            )
            now = now.model_copy(update={"host": then.host, "port": then.port})
            config = config.model_copy(update={"server": now})
        self.config = config
        # One at a time, the new worker started before the old one stops; the count may
        # change: new workers past the old count, old ones past the new count just stop.
        old = self.workers
        self.workers = []
        for index in range(max(len(old), now.worker_count)):
            if self._stopping:  # SIGTERM mid-reload: no more forks; old and new stop together
                self.workers += old[index:]
                return
            if index < now.worker_count:
                self.workers.append(self._spawn(config))
            if index < len(old):
                _stop([old[index]], _STOP_GRACE_S)
                self._retire(old[index])
        _say(f"reloaded: {len(self.workers)} workers, pids {', '.join(map(str, self.workers))}")

    def _replace_dead(self) -> None:
        for index, pid in enumerate(self.workers):
            if self._stopping:  # Ctrl-C reaches the workers too: they end, and stay ended
                return
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            self._retire(pid)
            lived = time.monotonic() - self._started.pop(pid, 0.0)
            self._died_starting = self._died_starting + 1 if lived < _DIED_STARTING_S else 0
            if self._died_starting >= _GIVE_UP_AFTER:
                self._stopping = True
                raise SteadystreamError(
                    f"the workers die as they start ({self._died_starting} in a row, the last"
                    f" {_status(status)}; their output above says why): the gateway stops"
                )
            wait = self._last_restart + _RESTART_EVERY_S - time.monotonic()
            if wait > 0:  # a worker dying at start would otherwise spin the parent
                time.sleep(wait)
            self._last_restart = time.monotonic()
            self.workers[index] = self._spawn(self.config)
            _say(f"worker {pid} ended ({_status(status)}); started {self.workers[index]}")

    def _retire(self, pid: int) -> None:
        try:
            self.retired.fold(pid)
        except OSError as exc:  # a full disk: its snapshot stays, and still counts
            _say(f"could not fold the metrics of ended worker {pid}: {exc}")

    def _keep_retired(self) -> None:
        # The folder removed (a cleaner of /tmp): the ended workers' counts are written
        # again from this process's memory, or /metrics would go back.
        try:
            self.retired.keep()
        except OSError as exc:
            if not self._retired_lost:
                _say(f"cannot write the ended workers' metrics again: {exc}")
            self._retired_lost = True
        else:
            self._retired_lost = False

    def _stop_all(self) -> None:
        workers, self.workers = self.workers, []
        _stop(workers, _STOP_GRACE_S)


def _startable(config: GatewayConfig) -> None:
    """Raise the :class:`SteadystreamError` a worker would die of at start (a key's variable
    not set, a recording directory it cannot write to): checked here, once, before any
    worker is replaced."""
    from steadystream.gateway.app import check_startable

    check_startable(config)


def _end_with(parent: int) -> None:
    """Have the kernel SIGTERM this worker when ``parent`` dies, even by SIGKILL, so that no
    worker serves on orphaned (Linux; elsewhere the parent's own stop is all there is)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died between the fork and the call
        os.kill(os.getpid(), signal.SIGTERM)


def _worker(
    config: GatewayConfig,
    sock: socket.socket,
    folder: Path,
    log_level: str,
    serve_on: ServeOn,
    glass_secret: bytes,
) -> None:
    """One worker's life, in the forked child: its own app, event loop and metrics snapshot."""
    from steadystream.gateway.app import create_app

    app = create_app(config, glass_secret=glass_secret)
    state = app.state.gateway
    # One set of model labels for every worker, this one and those before and after it.
    state.model_labels.share(folder / MODEL_LABELS)
    metrics = state.metrics
    shared = SharedMetrics(metrics.registry, folder, view=metrics.view)
    metrics.shared = shared
    serve_on(app, config, sock, log_level, outer=_Publishing(app, shared, os.getppid()))
    shared.publish()  # (the loop and its threads are done: nothing newer can come)


class _Publishing:
    """The gateway app, with its metrics snapshot refreshed every second while it serves."""

    def __init__(self, app: ASGIApp, shared: SharedMetrics, parent: int) -> None:
        self.app = app
        self.shared = shared
        self.parent = parent
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._publish_at_end(send))
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._publish())
        await self.app(scope, receive, send)

    def _publish_at_end(self, send: Send) -> Send:
        # uvicorn ends the worker by raising the SIGTERM it caught again once it has shut
        # down, before ``_worker`` could publish: the last snapshot goes out here, after
        # the streams that were let finish, or a replaced worker's last second is lost.
        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                if os.getppid() == self.parent:
                    with contextlib.suppress(OSError):
                        self.shared.publish()
                else:  # the parent died (SIGKILL): nobody will read or remove the folder
                    shutil.rmtree(self.shared.folder, ignore_errors=True)
            await send(message)

        return sending

    async def _publish(self) -> None:
        # The snapshot is taken on the loop and written from a thread: with many series,
        # turning them into a file takes long enough to stall every stream here.
        shared = self.shared
        while True:
            with contextlib.suppress(OSError):  # a full disk must not end the worker
                await asyncio.to_thread(shared.publish, shared.snapshot())
            await asyncio.sleep(PUBLISH_EVERY_S)


def _stop(pids: list[int], grace_s: float) -> None:
    """SIGTERM ``pids``, wait up to ``grace_s`` for them, then SIGKILL what is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
            left.discard(pid)
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _say(message: str) -> None:
    print(f"gateway: {message}", file=sys.stderr, flush=True)
