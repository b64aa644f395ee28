"""`gateway --workers N`: one port, N processes, one /metrics, one recording file each, reload."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from steadystream import ConfigError
from steadystream._histogram import FastHistogram, Histograms
from steadystream._processes import Child, free_port, steadystream_command
from steadystream.files import read_jsonl
from steadystream.gateway.config import GatewayConfig, config_from_mapping, with_server
from steadystream.gateway.shared_metrics import LIVE_S, SharedMetrics
from steadystream.lab import LabServer

UPSTREAMS = [{"name": "lab", "base_url": "http://127.0.0.1:9/v1"}]


def test_workers_are_checked_like_every_key() -> None:
    config = config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": "auto"}})
    assert config.server.worker_count == len(os.sched_getaffinity(0))
    assert with_server(config, {"workers": "3"}).server.worker_count == 3
    for bad in (0, "many", True):
        with pytest.raises(ConfigError, match=r"server\.workers.*at least 1\) or auto"):
            config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": bad}})
    with pytest.raises(ConfigError, match=r"--workers '0' \(server\.workers\): a whole"):
        with_server(config, {"workers": "0"})
    # Digits other than 0-9 are digits to Python ("²" fails int(), "١" passes as 1): refused.
    for bad in ("²", "١"):
        with pytest.raises(ConfigError, match=r"--workers .*\(at least 1\) or auto"):
            with_server(config, {"workers": bad})


def test_a_worker_count_far_past_the_cores_is_refused_before_anything_forks() -> None:
    cores = len(os.sched_getaffinity(0))
    most = 4 * cores
    config = config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": most}})
    assert config.server.worker_count == most
    for bad in (most + 1, 99_999, "99999"):
        with pytest.raises(
            ConfigError, match=rf"server\.workers.*at most {most} for {cores} cores"
        ):
            config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": bad}})
    with pytest.raises(ConfigError, match=r"the command line: --workers.*auto gives one per"):
        with_server(config, {"workers": "99999"})


def worker_registry(streams: float, active: float, gaps: list[float]) -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("ss_streams", "s", ["tenant"], registry=registry).labels("web").inc(streams)
    Gauge("ss_active", "a", registry=registry).set(active)
    histogram = FastHistogram("ss_gap_seconds", "g", ("edge",), (0.1, 1.0))
    histogram.observe(("downstream",), gaps)
    registry.register(Histograms([histogram]))
    return registry


def samples(exposition: bytes) -> dict[str, float]:
    lines = exposition.decode().splitlines()
    return {
        name: float(value)
        for line in lines
        if line and not line.startswith("#")
        for name, value in [line.rsplit(" ", 1)]
    }


def test_snapshots_sum_counters_and_histograms_and_gauges_of_live_workers(tmp_path: Path) -> None:
    one = SharedMetrics(worker_registry(3, 2, [0.05, 0.5]), tmp_path)
    two = SharedMetrics(worker_registry(4, 1, [0.05, 2.0]), tmp_path)
    two.path = tmp_path / "worker-2.json"  # a second process's file
    two.publish()
    summed = samples(one.exposition())
    assert summed['ss_streams_total{tenant="web"}'] == 7
    assert summed["ss_active"] == 3
    assert summed['ss_gap_seconds_bucket{edge="downstream",le="0.1"}'] == 2
    assert summed['ss_gap_seconds_bucket{edge="downstream",le="+Inf"}'] == 4
    assert summed['ss_gap_seconds_count{edge="downstream"}'] == 4
    # A worker that stopped refreshing its snapshot is gone: its streams still count, its
    # streams in flight do not.
    stale = time.time() - LIVE_S - 1
    os.utime(two.path, (stale, stale))
    summed = samples(one.exposition())
    assert summed['ss_streams_total{tenant="web"}'] == 7
    assert summed["ss_active"] == 2


def test_a_snapshot_written_late_never_replaces_a_newer_one(tmp_path: Path) -> None:
    # Snapshots are written from threads (a scrape's and the once-a-second one): the one
    # taken first may end last, and must not take the file back in time.
    streams = [0]

    def view() -> CollectorRegistry:  # a copy of the worker's numbers, as GatewayMetrics.view
        copy = CollectorRegistry()
        Counter("ss_streams", "s", registry=copy).inc(streams[0])
        return copy

    shared = SharedMetrics(CollectorRegistry(), tmp_path, view=view)
    streams[0] = 1
    older = shared.snapshot()
    streams[0] = 2
    newer = shared.snapshot()
    shared.publish(newer)
    shared.publish(older)
    (family,) = orjson.loads(shared.path.read_bytes())
    assert [value for name, _, value in family["samples"] if name == "ss_streams_total"] == [2]
    assert samples(shared.exposition(older))["ss_streams_total"] == 2


def test_ended_workers_fold_into_one_file_and_still_count(tmp_path: Path) -> None:
    from steadystream.gateway.shared_metrics import RETIRED, retire

    def worker(pid: int, streams: float, active: float, gaps: list[float]) -> SharedMetrics:
        shared = SharedMetrics(worker_registry(streams, active, gaps), tmp_path)
        shared.path = tmp_path / f"worker-{pid}-1.json"
        shared.publish()
        return shared

    live = worker(1, 3, 2, [0.05, 0.5])
    for pid in range(100, 150):  # fifty restarts of a worker, each with a stream
        worker(pid, 1, 1, [2.0])
        retire(tmp_path, pid)
    worker(200, 4, 1, [0.05])
    before = samples(live.exposition())
    assert before['ss_streams_total{tenant="web"}'] == 3 + 50 + 4
    assert before["ss_active"] == 2 + 1  # live workers only
    assert before['ss_gap_seconds_count{edge="downstream"}'] == 2 + 50 + 1
    assert before['ss_gap_seconds_bucket{edge="downstream",le="1.0"}'] == 2 + 1
    retire(tmp_path, 200)
    after = samples(live.exposition())
    assert after['ss_streams_total{tenant="web"}'] == 57  # nothing goes backwards
    assert after["ss_active"] == 2  # an ended worker's streams in flight are not
    assert after['ss_gap_seconds_count{edge="downstream"}'] == 53
    # One file per live worker, retired.json, and the last fold's file: named in
    # retired.json (so skipped), removed at the next fold.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        RETIRED,
        "worker-1-1.json",
        "worker-200-1.json",
    ]
    # (and the fold before's, removed now but named until the next fold)
    folded = orjson.loads((tmp_path / RETIRED).read_bytes())["folded"]
    assert folded == ["worker-149-1.json", "worker-200-1.json"]
    worker(300, 5, 0, [])
    retire(tmp_path, 300)
    assert not (tmp_path / "worker-200-1.json").exists()
    assert samples(live.exposition())['ss_streams_total{tenant="web"}'] == 62
    retire(tmp_path, 999)  # nothing of that worker: nothing changes
    assert samples(live.exposition())['ss_streams_total{tenant="web"}'] == 62


def test_a_scrape_that_two_folds_overtake_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steadystream.gateway import shared_metrics

    live = SharedMetrics(worker_registry(1, 0, []), tmp_path)
    for pid in (7, 8):
        ended = SharedMetrics(worker_registry(10, 0, []), tmp_path)
        ended.path = tmp_path / f"worker-{pid}-1.json"
        ended.publish()
    real_read = shared_metrics._read
    folds = []

    def read(path: Path) -> object:
        # The parent folds both ended workers just as this scrape reaches the first one's
        # file, after it read retired.json: the second fold removes that file.
        if path.name == "worker-7-1.json" and not folds:
            folds.append(path)
            shared_metrics.retire(tmp_path, 7)
            shared_metrics.retire(tmp_path, 8)
        return real_read(path)

    monkeypatch.setattr(shared_metrics, "_read", read)
    assert samples(live.exposition())['ss_streams_total{tenant="web"}'] == 21
    assert folds


# -- a real gateway with two workers ----------------------------------------------------------


def stream(url: str) -> None:
    body = {
        "model": "lab",
        "stream": True,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", orjson.dumps(body), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert b"[DONE]" in answer.read()


def streams_total(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        found = samples(answer.read())
    return sum(v for k, v in found.items() if k.startswith("steadystream_streams_total{"))


def children(pid: int) -> set[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(p) for p in text.split()}


def wait_for(check: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.integration
def test_two_workers_one_port_one_metrics_and_a_reload(tmp_path: Path) -> None:
    recordings = tmp_path / "recordings"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with LabServer("steady") as lab:
        config = tmp_path / "gateway.yaml"
        config.write_text(
            f"server: {{port: {port}, workers: 2}}\n"
            f"upstreams: [{{name: lab, base_url: '{lab.base_url}'}}]\n"
            f"recording: {{enabled: true, directory: '{recordings}'}}\n"
        )
        command = steadystream_command("gateway", "--config", str(config))
        with Child("the gateway", command, health_url=f"{url}/healthz") as gateway:
            assert gateway.pid is not None
            wait_for(lambda: len(children(gateway.pid)) == 2)
            first = children(gateway.pid)
            for _ in range(10):
                stream(url)
            # Whichever worker answers the scrape, it counts every worker's streams.
            wait_for(lambda: streams_total(url) == 10)
            assert [streams_total(url) for _ in range(6)] == [10] * 6

            os.kill(gateway.pid, signal.SIGHUP)  # reload: new workers, the port keeps answering
            wait_for(lambda: len(children(gateway.pid)) == 2 and not children(gateway.pid) & first)
            second = children(gateway.pid)
            for _ in range(4):
                stream(url)
            # Replaced at once, before their once-a-second snapshot: the workers publish
            # their last one as they stop, so those 4 streams count too.
            os.kill(gateway.pid, signal.SIGHUP)
            wait_for(lambda: len(children(gateway.pid)) == 2 and not children(gateway.pid) & second)
            wait_for(lambda: streams_total(url) == 14)  # the replaced workers' streams count
            last = children(gateway.pid)
            gateway.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            assert gateway.process.wait(timeout=30) == 0  # type: ignore[union-attr]
    for pid in first | second | last:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # A file per worker that served a stream (its pid in the name; the kernel chooses which
    # worker takes a connection), whole lines only: both edges of all 14 streams.
    files = sorted(recordings.glob("*.jsonl"))
    pids = [int(f.name.split("-")[2]) for f in files]
    assert len(pids) == len(set(pids)) >= 2  # one before the reload and one after, at least
    assert set(pids) <= first | second | last
    runs = [read_jsonl(f) for f in files]
    assert all(run.truncated_line is None for run in runs)
    assert sum(len(run.timelines) for run in runs) == 28


# -- the parent, in this process, with workers that only wait -----------------------------------


def idle_worker(*args: object, **kwargs: object) -> None:
    """A worker's serving, replaced: wait for the parent's SIGTERM (the default ends us)."""
    time.sleep(60)


def test_the_parent_replaces_dead_workers_reloads_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steadystream.gateway import workers

    monkeypatch.delenv("STEADYSTREAM_TEST_UNSET_KEY", raising=False)
    config = config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": 2}})
    # Valid, but no worker could start with it: a key's variable is not set.
    keyless = config_from_mapping(
        {
            "upstreams": [{**UPSTREAMS[0], "api_key_env": "STEADYSTREAM_TEST_UNSET_KEY"}],
            "server": {"workers": 2},
        }
    )
    three = with_server(config, {"workers": "3"})
    reloads = iter([ConfigError("gateway.yaml: key 'x': bad"), keyless, three])

    def reload() -> GatewayConfig:
        found = next(reloads)
        if isinstance(found, Exception):
            raise found
        return found

    seen: dict[str, set[int]] = {}
    me = os.getpid()
    others = children(me)  # this process may have children already (a session's local Ray)

    def workers_now() -> set[int]:
        return children(me) - others

    def drive() -> None:
        try:
            wait_for(lambda: len(workers_now()) == 2)
            seen["first"] = workers_now()
            os.kill(min(seen["first"]), signal.SIGKILL)  # a worker dies: it is replaced
            wait_for(lambda: len(workers_now()) == 2 and min(seen["first"]) not in workers_now())
            seen["replaced"] = workers_now()
            os.kill(me, signal.SIGHUP)  # a bad configuration: refused, the workers stay
            time.sleep(0.6)
            assert workers_now() == seen["replaced"]
            os.kill(me, signal.SIGHUP)  # one no worker could start with: refused too
            time.sleep(0.6)
            assert workers_now() == seen["replaced"]
            os.kill(me, signal.SIGHUP)  # a good one, with a worker more: every one replaced
            wait_for(lambda: len(workers_now()) == 3 and not workers_now() & seen["replaced"])
            seen["reloaded"] = workers_now()
        finally:
            os.kill(me, signal.SIGTERM)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Started as by nohup or from a shell's background job: SIGHUP ignored. The handlers
    # must be given back as they were found, not as Python's defaults.
    outer = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        found = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)}
        driver = threading.Thread(target=drive)
        driver.start()
        workers.serve_workers(config, sock, idle_worker, reload=reload)
        driver.join()
        given_back = {sig: signal.getsignal(sig) for sig in found}
    finally:
        signal.signal(signal.SIGHUP, outer)
    assert set(seen) == {"first", "replaced", "reloaded"}
    assert workers_now() == set()  # every worker stopped and reaped
    assert sock.fileno() == -1  # the parent closed the port
    assert given_back == found


def test_a_configuration_no_worker_could_start_with_is_refused_before_any_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from steadystream.gateway.server import serve

    monkeypatch.delenv("STEADYSTREAM_TEST_UNSET_KEY", raising=False)
    config = config_from_mapping(
        {
            "upstreams": [{**UPSTREAMS[0], "api_key_env": "STEADYSTREAM_TEST_UNSET_KEY"}],
            "server": {"port": free_port(), "workers": 2},
        }
    )
    before = children(os.getpid())
    with pytest.raises(ConfigError, match="STEADYSTREAM_TEST_UNSET_KEY"):
        serve(config)
    assert children(os.getpid()) == before  # no worker started to crash again and again


@pytest.mark.parametrize("workers", [1, 2])
def test_an_address_in_use_is_one_clear_error(workers: int) -> None:
    from steadystream.gateway.server import serve

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_from_mapping(
            {"upstreams": UPSTREAMS, "server": {"port": port, "workers": workers}}
        )
        with pytest.raises(ConfigError, match=rf"cannot listen on 127\.0\.0\.1:{port}: Address"):
            serve(config)


def test_one_worker_reports_sighup_instead_of_ending(capfd: pytest.CaptureFixture[str]) -> None:
    from steadystream.gateway.server import _hangup_ignored

    before = signal.getsignal(signal.SIGHUP)
    with _hangup_ignored():
        os.kill(os.getpid(), signal.SIGHUP)  # by default: this process would end here
        time.sleep(0.05)
    assert "SIGHUP ignored" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGHUP) is before


def test_one_worker_stops_on_sigterm_with_exit_status_0() -> None:
    port = free_port()
    command = steadystream_command(
        "gateway", "--upstream", "http://127.0.0.1:9/v1", "--port", str(port)
    )
    with Child("the gateway", command, health_url=f"http://127.0.0.1:{port}/healthz") as gateway:
        gateway.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        # uvicorn raises the SIGTERM it caught again once it has stopped: 143 by default
        assert gateway.process.wait(timeout=30) == 0  # type: ignore[union-attr]


def process_ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # ended, maybe not yet reaped by whoever adopted it


@pytest.mark.integration
def test_workers_end_with_a_parent_killed_outright(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, workers: 2}}\n"
        "upstreams: [{name: lab, base_url: 'http://127.0.0.1:9/v1'}]\n"
    )
    command = steadystream_command("gateway", "--config", str(config))
    # The metrics folder a killed parent cannot remove goes where pytest removes it.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    health = f"http://127.0.0.1:{port}/healthz"
    with Child("the gateway", command, health_url=health, env=env) as gateway:
        assert gateway.pid is not None
        wait_for(lambda: len(children(gateway.pid)) == 2)
        workers = children(gateway.pid)
        os.kill(gateway.pid, signal.SIGKILL)  # no chance to stop them itself
        wait_for(lambda: all(process_ended(pid) for pid in workers), timeout_s=20)


def test_auto_counts_no_more_cores_than_the_containers_cpu_quota(tmp_path: Path) -> None:
    from steadystream._validation import usable_cores

    affinity = len(os.sched_getaffinity(0))
    assert usable_cores(tmp_path) == affinity  # nothing to read: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == affinity  # no limit
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert usable_cores(tmp_path) == 1  # half a CPU: one worker still
    (tmp_path / "cpu.max").write_text(f"{(affinity + 8) * 100000} 100000\n")
    assert usable_cores(tmp_path) == affinity  # a quota past the cores: the cores
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(tmp_path) == min(affinity, 2)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert usable_cores(tmp_path) == affinity


@pytest.mark.parametrize("workers", [1, 2])
def test_a_recording_directory_that_cannot_be_written_is_refused_at_start(
    tmp_path: Path, workers: int
) -> None:
    from steadystream.gateway.server import serve

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = config_from_mapping(
        {
            "upstreams": UPSTREAMS,
            "server": {"port": free_port(), "workers": workers},
            "recording": {"enabled": True, "directory": str(blocker / "recordings")},
        }
    )
    before = children(os.getpid())
    with pytest.raises(ConfigError, match=r"recording\.directory: cannot write recordings to"):
        serve(config)
    assert children(os.getpid()) == before


def test_a_stop_during_a_reload_forks_no_more_and_a_kept_port_is_remembered(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from steadystream.gateway import workers

    me = os.getpid()
    config = config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": 2}})
    moved = with_server(config, {"port": config.server.port + 1})
    spawned: list[int] = []
    spawn = workers._Supervisor._spawn

    def counting(self: workers._Supervisor, config: GatewayConfig) -> int:
        spawned.append(pid := spawn(self, config))
        return pid

    monkeypatch.setattr(workers._Supervisor, "_spawn", counting)

    def reloads() -> Iterator[GatewayConfig]:
        yield moved  # the port cannot move: said, and the old one kept
        yield config  # back to the port in use: nothing to say
        os.kill(me, signal.SIGTERM)  # a stop arrives while this reload runs
        yield config

    found = reloads()

    def drive() -> None:
        wait_for(lambda: len(spawned) == 2)
        os.kill(me, signal.SIGHUP)
        wait_for(lambda: len(spawned) == 4)
        os.kill(me, signal.SIGHUP)
        wait_for(lambda: len(spawned) == 6)
        os.kill(me, signal.SIGHUP)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    driver = threading.Thread(target=drive)
    driver.start()
    workers.serve_workers(config, sock, idle_worker, reload=lambda: next(found))
    driver.join()
    assert len(spawned) == 6  # the third reload forked nothing
    err = capfd.readouterr().err
    assert err.count("server.host and server.port stay") == 1
    assert f"stay 127.0.0.1:{config.server.port} on a reload" in err


def test_the_command_gives_sighup_back_as_it_found_it() -> None:
    from typer.testing import CliRunner

    from steadystream.cli import app

    before = signal.getsignal(signal.SIGHUP)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            app, ["gateway", "--upstream", "http://127.0.0.1:9/v1", "--port", str(port)]
        )
    assert result.exit_code == 2  # the address is in use: refused, and the handler restored
    assert signal.getsignal(signal.SIGHUP) is before


def test_a_metrics_folder_that_cannot_be_written_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from steadystream.gateway import workers

    def full(path: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(workers, "start_shared_models", full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": 2}})
    sock = socket.socket()
    with pytest.raises(ConfigError, match=r"server\.workers: .*No space left"):
        workers.serve_workers(config, sock, lambda *args, **kwargs: None)
    assert sock.fileno() == -1  # closed
    assert list(tmp_path.iterdir()) == []  # the folder made for the metrics is gone


def test_a_scrape_after_the_folder_was_removed_makes_it_again(tmp_path: Path) -> None:
    # A cleaner of /tmp took the workers' folder: every scrape was a 500 from then on.
    import shutil

    folder = tmp_path / "metrics"
    folder.mkdir(mode=0o700)
    shared = SharedMetrics(worker_registry(3, 2, [0.05, 0.5]), folder)
    shutil.rmtree(folder)
    assert samples(shared.exposition())['ss_streams_total{tenant="web"}'] == 3
    assert folder.stat().st_mode & 0o777 == 0o700


def dying_worker(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("this worker cannot start")


def test_workers_that_die_as_they_start_stop_the_gateway_saying_so(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A worker that dies at start was replaced once a second forever: the port took
    # connections that nobody answered. Some in a row, and the gateway stops.
    from steadystream._exceptions import SteadystreamError
    from steadystream.gateway import workers

    monkeypatch.setattr(workers, "_RESTART_EVERY_S", 0.01)
    monkeypatch.setattr(workers, "_GIVE_UP_AFTER", 3)
    config = config_from_mapping({"upstreams": UPSTREAMS, "server": {"workers": 2}})
    me = os.getpid()
    others = children(me)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    with pytest.raises(SteadystreamError, match=r"the workers die as they start \(3 in a row"):
        workers.serve_workers(config, sock, dying_worker)
    assert children(me) - others == set()  # every worker stopped and reaped
    assert sock.fileno() == -1
    assert "this worker cannot start" in capfd.readouterr().err
