"""The one mapping of aiohttp's and the OS's errors to steadystream's."""

from __future__ import annotations

import aiohttp
import pytest

from steadystream import UpstreamConnectError, UpstreamStreamError
from steadystream._exceptions import UpstreamTimeoutError
from steadystream._transport_errors import map_transport_error, map_transport_errors


def test_a_transport_error_leaves_as_ours_from_the_original() -> None:
    cause = ConnectionRefusedError(111, "Connection refused")
    with (
        pytest.raises(UpstreamConnectError) as caught,
        map_transport_errors(UpstreamConnectError, "cannot reach upstream 'a'"),
    ):
        raise cause
    assert str(caught.value) == "cannot reach upstream 'a': [Errno 111] Connection refused"
    assert caught.value.__cause__ is cause


def test_timeouts_may_map_to_their_own_error_and_messages_are_scrubbed() -> None:
    with (
        pytest.raises(UpstreamTimeoutError, match="no headers"),
        map_transport_errors(UpstreamConnectError, "no headers", timeout=UpstreamTimeoutError),
    ):
        raise TimeoutError
    with (
        pytest.raises(UpstreamStreamError, match=r"^broke: sk-\*\*\* said no$"),
        map_transport_errors(UpstreamStreamError, "broke", redact=lambda t: t.replace("1", "*")),
    ):
        raise aiohttp.ClientPayloadError("sk-111 said no")
    error = map_transport_error(aiohttp.ServerDisconnectedError(), UpstreamStreamError, "gone")
    assert isinstance(error, UpstreamStreamError)
    assert str(error).startswith("gone: ")


def test_anything_else_passes_through() -> None:
    with pytest.raises(KeyError), map_transport_errors(UpstreamConnectError, "x"):
        raise KeyError("not the network's fault")
