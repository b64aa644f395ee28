"""App factories for ``uvicorn --factory`` in child processes (see
``tests.support.real_parts.asgi_child``)."""

from __future__ import annotations

import os

from starlette.applications import Starlette

from steadystream.gateway import create_app as gateway_app
from steadystream.gateway import load_config

GATEWAY_CONFIG_ENV = "STEADYSTREAM_TEST_GATEWAY_CONFIG"


def gateway() -> Starlette:
    """The gateway with the configuration file named by ``$STEADYSTREAM_TEST_GATEWAY_CONFIG``."""
    return gateway_app(load_config(os.environ[GATEWAY_CONFIG_ENV]))
