"""`gateway --workers N` as a running service, pushed: a second gateway on the port, a reload
that fails in an unmapped way, a metrics folder taken away or turned into a file, a stop that
reaches a worker as it is forked, a worker killed mid-stream and a stop with streams open."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from steadystream import ConfigError
from steadystream._processes import free_port, steadystream_command
from steadystream.gateway.config import GatewayConfig, config_from_mapping
from steadystream.gateway.shared_metrics import RETIRED, Retired, SharedMetrics
from steadystream.lab import LabServer

UPSTREAMS = [{"name": "lab", "base_url": "http://127.0.0.1:9/v1"}]
TWO = {"upstreams": UPSTREAMS, "server": {"workers": 2}}


def wait_for(check: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def registry(streams: float, active: float = 0) -> CollectorRegistry:
    found = CollectorRegistry()
    Counter("ss_streams", "s", registry=found).inc(streams)
    Gauge("ss_active", "a", registry=found).set(active)
    return found


def samples(exposition: bytes) -> dict[str, float]:
    return {
        name: float(value)
        for line in exposition.decode().splitlines()
        if line and not line.startswith("#")
        for name, value in [line.rsplit(" ", 1)]
    }


def other_worker(folder: Path, pid: int, streams: float, active: float = 0) -> Path:
    """Another worker's snapshot, as its process would have written it."""
    shared = SharedMetrics(registry(streams, active), folder)
    shared.path = folder / f"worker-{pid}-1.json"
    shared.publish()
    return shared.path


# -- the port -----------------------------------------------------------------------------------


def test_a_second_gateway_cannot_bind_the_port_while_the_first_ones_workers_start() -> None:
    # The parent bound the port and left listening to its workers: until the first of them
    # listened, a second gateway (or any program with SO_REUSEADDR) bound the same port,
    # listened first, and the first gateway's workers then waited on a socket that never
    # got a connection, started and healthy by their own account.
    from steadystream.gateway.server import _listen

    config = config_from_mapping({**TWO, "server": {"port": free_port(), "workers": 2}})
    first = _listen(config)
    try:
        port = config.server.port
        with pytest.raises(ConfigError, match=rf"cannot listen on 127\.0\.0\.1:{port}: Address"):
            _listen(config)
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError, match="Address already in use"):
                other.bind(("127.0.0.1", port))
        # and the first one's connections wait for its workers instead of being refused
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        first.close()


# -- reloads ------------------------------------------------------------------------------------


def supervise(
    drive: Callable[[], None], config: GatewayConfig, worker: object, **kw: object
) -> None:
    """Run the real supervisor here on a bound socket, while ``drive`` (in a thread) signals
    this process; the socket is closed after."""
    from steadystream.gateway import workers

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        driver = threading.Thread(target=drive)
        driver.start()
        try:
            workers.serve_workers(config, sock, worker, **kw)  # type: ignore[arg-type]
        finally:
            driver.join(timeout=30)


def idle_worker(*args: object, **kwargs: object) -> None:
    """A worker's serving, replaced: wait for the parent's SIGTERM (the default ends us)."""
    time.sleep(60)


def test_a_reload_that_fails_in_an_unmapped_way_keeps_the_workers(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The configuration's folder made unreadable: Path.exists() raised PermissionError out
    # of the reload, through the parent, which stopped every worker and exited.
    from steadystream.gateway import workers

    me = os.getpid()
    config = config_from_mapping(TWO)
    spawned: list[int] = []
    spawn = workers._Supervisor._spawn

    def counting(self: workers._Supervisor, config: GatewayConfig) -> int:
        spawned.append(pid := spawn(self, config))
        return pid

    monkeypatch.setattr(workers._Supervisor, "_spawn", counting)
    asked = threading.Event()

    def reload() -> GatewayConfig:
        asked.set()
        raise PermissionError(errno.EACCES, "Permission denied", "/etc/gateway/gateway.yaml")

    def drive() -> None:
        try:
            wait_for(lambda: len(spawned) == 2)
            os.kill(me, signal.SIGHUP)
            wait_for(asked.is_set)
        finally:
            os.kill(me, signal.SIGTERM)

    supervise(drive, config, idle_worker, reload=reload)
    assert asked.is_set()
    assert len(spawned) == 2  # the reload forked nothing, and stopped nothing before the stop
    err = capfd.readouterr().err
    assert (
        "reload refused, the workers keep the old configuration: PermissionError: [Errno 13] "
        "Permission denied: '/etc/gateway/gateway.yaml'"
    ) in err


def test_a_configuration_path_that_cannot_be_looked_up_is_one_clear_error(tmp_path: Path) -> None:
    # A name the system refuses to look up (too long here; a folder this user may not enter
    # does the same): a traceback at start, and on a reload the end of the gateway.
    from typer.testing import CliRunner

    from steadystream.cli import app
    from steadystream.cli.gateway import _load

    path = tmp_path / ("a" * 300) / "gateway.yaml"
    result = CliRunner().invoke(app, ["gateway", "--config", str(path)])
    assert result.exit_code == 2, result.exception
    assert "cannot read the gateway configuration: File name too long" in result.output
    with pytest.raises(ConfigError, match="cannot read the gateway configuration"):
        _load(path)  # what a reload reads with


# -- the metrics folder -------------------------------------------------------------------------


def test_a_scrape_survives_a_snapshot_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A full disk, or the folder made read-only: every scrape was a 500 (the write of this
    # worker's own snapshot raised), the metrics gone when they are needed most.
    from steadystream.gateway import shared_metrics

    folder = tmp_path / "metrics"
    folder.mkdir()
    streams = [1.0]

    def view() -> CollectorRegistry:
        return registry(streams[0], 1)

    shared = SharedMetrics(CollectorRegistry(), folder, view=view)
    shared.publish()  # its file says 1; the other worker's says 4
    other_worker(folder, 2, 4, 1)
    streams[0] = 3

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shared_metrics, "write_whole", full)
    summed = samples(shared.exposition())
    assert summed["ss_streams_total"] == 3 + 4  # its own from memory, not its stale file too
    assert summed["ss_active"] == 2
    assert capfd.readouterr().err.count("cannot write its metrics snapshot") == 1
    shared.exposition()
    assert "cannot write" not in capfd.readouterr().err  # said once
    monkeypatch.undo()

    # The folder replaced by a file: only its own numbers are left to show, and they are.
    shutil.rmtree(folder)
    folder.write_text("")
    assert samples(shared.exposition())["ss_streams_total"] == 3


def test_ended_workers_counts_come_back_after_the_folder_is_removed(tmp_path: Path) -> None:
    # A cleaner of /tmp took the folder: the workers wrote their own snapshots again, but
    # retired.json, the only record of the workers that ended, was gone, and /metrics went
    # back (4 streams, then 3, in a live gateway).
    folder = tmp_path / "metrics"
    folder.mkdir()
    retired = Retired(folder)
    live = SharedMetrics(registry(3), folder)
    other_worker(folder, 7, 5)
    retired.fold(7)
    assert samples(live.exposition())["ss_streams_total"] == 8
    retired.keep()  # nothing to do: the file is the one written
    shutil.rmtree(folder)
    assert samples(live.exposition())["ss_streams_total"] == 3  # until the parent's next tick
    retired.keep()
    assert samples(live.exposition())["ss_streams_total"] == 8
    # A worker that ends after it: folded onto the kept sums, not onto an empty file.
    (folder / RETIRED).unlink()
    other_worker(folder, 8, 2)
    retired.fold(8)
    assert samples(live.exposition())["ss_streams_total"] == 10
    assert orjson.loads((folder / RETIRED).read_bytes())["folded"][-1] == "worker-8-1.json"


# -- signals ------------------------------------------------------------------------------------


def marking_worker(*args: object, **kwargs: object) -> None:
    """A worker that says it served (a file named by its pid), then waits for its stop."""
    folder = Path(os.environ["STEADYSTREAM_TEST_MARKS"])
    (folder / str(os.getpid())).write_text("")
    time.sleep(60)


def test_a_stop_that_reaches_a_worker_as_it_is_forked_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SIGTERM that reached a child before it dropped the parent's handlers only set the
    # parent's flag in the child: the worker served on, until the parent's SIGKILL 10 s
    # later cut its streams without a word and lost its last metrics.
    from steadystream.gateway import workers

    monkeypatch.setenv("STEADYSTREAM_TEST_MARKS", str(tmp_path))
    monkeypatch.setattr(workers, "_RESTART_EVERY_S", 0.01)
    real_fork = os.fork
    forked: list[int] = []

    def fork() -> int:
        pid = real_fork()
        if pid == 0 and not forked:  # the first worker: a stop arrives at once
            os.kill(os.getpid(), signal.SIGTERM)
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    me = os.getpid()

    def first_served() -> bool:
        return bool(forked) and (tmp_path / str(forked[0])).exists()

    def drive() -> None:
        try:
            # the first worker ended by its SIGTERM and was replaced, or (the bug) served
            wait_for(lambda: len(forked) >= 3 or first_served())
        finally:
            os.kill(me, signal.SIGTERM)

    supervise(drive, config_from_mapping(TWO), marking_worker)
    assert not first_served()
    assert len(forked) == 3  # the second worker, and the first one's replacement


# -- a real gateway: a worker killed mid-stream, the folder removed, a stop with streams open --


def start_stream(port: int, tokens: int) -> socket.socket:
    body = orjson.dumps(
        {
            "model": "lab",
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock


def read_to_end(sock: socket.socket, timeout_s: float = 30) -> bytes:
    sock.settimeout(timeout_s)
    got = b""
    with sock:
        while chunk := sock.recv(65536):
            got += chunk
    return got


def whole(answer: bytes) -> bool:
    return b"data: [DONE]" in answer and answer.endswith(b"\r\n0\r\n\r\n")


def streams_total(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        found = samples(answer.read())
    return sum(v for k, v in found.items() if k.startswith("steadystream_streams_total{"))


def counted(folder: Path, pid: int) -> float:
    """The streams in worker ``pid``'s snapshot."""
    total = 0.0
    for path in folder.glob(f"worker-{pid}-*.json"):
        for family in orjson.loads(path.read_bytes()):
            if family["name"] == "steadystream_streams":
                total += sum(v for name, _, v in family["samples"] if name.endswith("_total"))
    return total


def children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return set()
    return {int(p) for p in text.split()}


@pytest.mark.integration
def test_a_killed_worker_a_removed_folder_and_a_stop_with_streams_open(tmp_path: Path) -> None:
    import subprocess

    port = free_port()
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}  # where the metrics folder goes
    with LabServer("steady") as lab:
        config = tmp_path / "gateway.yaml"
        config.write_text(
            f"server: {{port: {port}, workers: 2}}\n"
            f"upstreams: [{{name: lab, base_url: '{lab.base_url}'}}]\n"
        )
        command = steadystream_command("gateway", "--config", str(config))
        log = (tmp_path / "gateway.log").open("wb")
        gateway = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_for(lambda: len(children(gateway.pid)) == 2, timeout_s=30)
            first = children(gateway.pid)
            for _ in range(4):
                assert whole(read_to_end(start_stream(port, 3)))
            wait_for(lambda: streams_total(port) == 4, timeout_s=10)

            # Killed outright (one that counted streams): its numbers stay counted once, and
            # it is replaced.
            (folder,) = (tmp_path / "tmp").glob("steadystream-gateway-metrics-*")
            victim = max(first, key=lambda pid: counted(folder, pid))
            assert counted(folder, victim) > 0
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: len(children(gateway.pid) - first) == 1, timeout_s=10)
            assert [streams_total(port) for _ in range(4)] == [4] * 4

            # The folder removed: the ended worker's streams come back within a tick.
            shutil.rmtree(folder)
            wait_for(lambda: (folder / RETIRED).exists(), timeout_s=5)
            wait_for(lambda: streams_total(port) == 4, timeout_s=5)

            # SIGTERM with streams open (10 s answers): each ends within uvicorn's two
            # seconds, in-band with the reason (docs/deploy.md), and the gateway is gone far
            # within Kubernetes' 30 s, with status 0.
            opened = [start_stream(port, 400) for _ in range(3)]
            for sock in opened:
                sock.settimeout(10)
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            gateway.send_signal(signal.SIGTERM)
            for sock in opened:
                answer = read_to_end(sock, timeout_s=15)
                assert whole(answer)  # ...not cut short: the error event, then the end
                assert b'"code":"gateway_shutdown"' in answer  # ended by the stop, not run out
            # (a wait bounded within Kubernetes' 30 s: TimeoutExpired if it is not gone)
            assert gateway.wait(timeout=20) == 0
        finally:
            if gateway.poll() is None:
                gateway.kill()
                gateway.wait(timeout=10)
            log.close()
    for pid in first | {victim}:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
