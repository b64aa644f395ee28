"""Fixtures of the stamped connection's tests: scripted servers, stopped after each test, and
both builds of the relay for every test (the server itself: tests/support/scripted.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.scripted import Script, ScriptedServer


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script, *, read_request: bool = True) -> ScriptedServer:
        server = ScriptedServer(script, read_request=read_request)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def _on_each_build(build: str) -> str:
    """Every test here runs on both builds of the relay's hot path (tests/conftest.py)."""
    return build
