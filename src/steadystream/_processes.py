"""Child processes we start (the demo's servers, labs for tests and benchmarks): start, wait
until they answer, stop by pid."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from steadystream._exceptions import SteadystreamError

__all__ = ["Child", "free_port", "run_command", "steadystream_command"]


# Ports for our children come from below the kernel's ephemeral range: a port from that
# range that was free when looked up may be taken, before the child binds it, as the local
# port of any connection opened meanwhile (a busy test run opens thousands), and the child
# then fails to start. Below it only listeners bind, and a listener's port is seen taken.
_LOWEST = 10_000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_draw = random.SystemRandom()  # (not the random module's: a seeded run must not pick alike)


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the child binds it a moment later)."""
    below = _ephemeral_start()
    for _ in range(64 if below - _LOWEST >= 1_000 else 0):
        port = _draw.randrange(_LOWEST, below)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # the kernel's choice
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unknown)."""
    try:
        return int(_EPHEMERAL.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def steadystream_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "steadystream", *args]


class Child:
    """A server we started: waits until it answers, and is always stopped by its pid."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        *,
        health_url: str,
        log: Path | None = None,
        start_timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
        health_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.args = list(args)
        self.health_url = health_url
        self.log = log  # None: the child's output is discarded
        self.start_timeout_s = start_timeout_s
        self.env = None if env is None else dict(env)  # None: this process's environment
        self.health_headers = dict(health_headers or {})  # e.g. a key, where health needs one
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Child:
        if self.log is None:
            self.process = subprocess.Popen(
                self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env
            )
        else:
            with self.log.open("wb") as out:
                self.process = subprocess.Popen(
                    self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env
                )
        self._wait_healthy(timeout_s=self.start_timeout_s)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def _wait_healthy(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                where = f"; its output is in {self.log}" if self.log is not None else ""
                raise SteadystreamError(
                    f"{self.name} exited with code {self.process.returncode} at start{where}"
                )
            try:
                request = urllib.request.Request(self.health_url, headers=self.health_headers)
                with urllib.request.urlopen(request, timeout=1.0) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise SteadystreamError(f"{self.name} did not answer {self.health_url} in {timeout_s:g}s")


def run_command(args: Sequence[str], *, log: Path, timeout_s: float) -> int:
    """Run a command to completion, its output to ``log``; returns its exit code."""
    with log.open("wb") as out:
        process = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
            raise SteadystreamError(
                f"{' '.join(args[2:4])} ran past {timeout_s:g}s and was stopped; see {log}"
            ) from None
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
