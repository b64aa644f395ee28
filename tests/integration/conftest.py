"""Fixtures of the integration tests: llama.cpp's server with Gemma 3 270M, for the session.

It is started as a child process on a free 127.0.0.1 port and stopped by its pid; the other
real parts, and how each is started, are in tests/support/real_parts.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from steadystream._processes import free_port
from tests.support.real_parts import (
    INSTALL_HINT,
    LLAMA_MODEL,
    Child,
    llama_model_path,
    llama_server_binary,
    running,
)


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Child]:
    """llama.cpp's OpenAI-compatible server (llama-cpp-python) serving Gemma 3 270M.

    ``--interrupt_requests False``: by default a new request makes the server end the stream
    in progress early (with ``[DONE]``); the tests want each request to run on its own, so
    that a stream stops only when its client leaves (docs/engines.md).
    """
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        pytest.fail(f"llama-cpp-python[server] is not installed: {INSTALL_HINT}")
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", llama_model_path(), "--model_alias", LLAMA_MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "2",
        "--interrupt_requests", "False", "--verbose", "False",
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with running(command, url=f"http://127.0.0.1:{port}", ready_path="/v1/models", log=log) as c:
        yield c


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Child]:
    """llama.cpp's own server (``make llama-server``) serving Gemma 3 270M: chat, the
    Responses API and the Messages API from one engine."""
    port = free_port()
    command = [
        llama_server_binary(), "--model", llama_model_path(), "--alias", LLAMA_MODEL,
        "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "2048", "--threads", "2",
        "--parallel", "2", "--no-webui",
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with running(command, url=f"http://127.0.0.1:{port}", ready_path="/health", log=log) as c:
        yield c
