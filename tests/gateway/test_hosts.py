"""Host and Origin name the gateway: a rebound page, another scheme, a second Origin refused.

Before, the "same origin" check compared an Origin without its scheme with the Host header
the request itself carried: a page on ``http://evil.example:PORT`` whose name was pointed at
127.0.0.1 (DNS rebinding) sent ``Host: evil.example:PORT`` and was let in; so was
``https://`` for a gateway serving ``http``; and of two ``Origin`` headers only the last was
looked at.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from steadystream._exceptions import ConfigError
from steadystream.gateway import GatewayServer
from steadystream.gateway.hosts import ServedHosts
from steadystream.lab import LabServer
from tests.support.gateway import chat_body, gateway_config, upstream

ALLOWED = "http://app.example.test"
OTHER = "http://evil.example.test"


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer("steady") as server:
        yield server


def ask(
    port: int,
    headers: list[tuple[str, str]],
    *,
    method: str = "GET",
    path: str = "/v1/models",
    body: dict[str, Any] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """A request whose every header is given, Host and repeated ones included."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        data = b"" if body is None else orjson.dumps(body)
        for name, value in [*headers, ("Content-Length", str(len(data)))]:
            connection.putheader(name, value)
        connection.endheaders(data)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def error_of(body: bytes) -> dict[str, Any]:
    error: dict[str, Any] = orjson.loads(body)["error"]
    return error


# -- against a gateway on loopback --------------------------------------------------------------


@pytest.mark.integration
def test_a_rebound_page_is_refused_before_anything_reaches_upstream(lab: LabServer) -> None:
    with GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        rebound = f"evil.example:{gw.port}"
        status, _, body = ask(
            gw.port,
            [("Host", rebound), ("Origin", f"http://{rebound}"), ("X-Request-Id", "rebound-1")],
            method="POST",
            path="/v1/chat/completions",
            body=chat_body(5),
        )
        without_origin, _, _ = ask(gw.port, [("Host", rebound)])  # not a browser: same answer
        mine = f"127.0.0.1:{gw.port}"
        own, _, _ = ask(gw.port, [("Host", mine), ("Origin", f"http://{mine}")])
    assert (status, without_origin, own) == (421, 421, 200)
    error = error_of(body)
    assert (error["code"], error["param"]) == ("host_not_allowed", "Host")
    assert rebound in error["message"]
    assert "localhost" in error["message"]  # what it does answer to
    assert "server.allowed_hosts" in error["message"]
    assert lab.truth("rebound-1") is None


@pytest.mark.integration
def test_the_loopback_names_are_its_own_with_any_port(lab: LabServer) -> None:
    # A port forward (ssh -L, a local TCP relay: tests/integration/test_llama_explain.py)
    # keeps the name and changes the port.
    with GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        port = gw.port
        statuses = {
            host: ask(port, [("Host", host)])[0]
            for host in (
                f"127.0.0.1:{port}",
                f"LOCALHOST:{port}",
                f"[::1]:{port}",
                f"localhost:{port + 1}",
                "localhost",  # port 80
                f"localhost.evil.example:{port}",
            )
        }
    assert list(statuses.values()) == [200, 200, 200, 200, 200, 421]


@pytest.mark.integration
def test_names_the_operator_lists_are_answered_and_are_the_gateways_own_origin(
    lab: LabServer,
) -> None:
    config = gateway_config(
        upstream(lab, "lab"), server={"allowed_hosts": ["gw.example.test", "tunnel.test:9000"]}
    )
    with GatewayServer(config) as gw:
        any_port = ask(gw.port, [("Host", "gw.example.test:8443")])[0]
        bare = ask(gw.port, [("Host", "gw.example.test")])[0]
        tunnel = ask(gw.port, [("Host", "tunnel.test:9000")])[0]
        tunnel_elsewhere = ask(gw.port, [("Host", "tunnel.test:9001")])[0]
        same, headers, _ = ask(
            gw.port, [("Host", "gw.example.test"), ("Origin", "http://gw.example.test")]
        )
    assert (any_port, bare, tunnel, tunnel_elsewhere, same) == (200, 200, 200, 421, 200)
    assert "access-control-allow-origin" not in headers  # its own page: no CORS needed


@pytest.mark.integration
def test_an_origin_is_the_gateways_own_only_with_its_scheme(lab: LabServer) -> None:
    with GatewayServer(gateway_config(upstream(lab, "lab"))) as gw:
        mine = f"127.0.0.1:{gw.port}"
        plain = ask(gw.port, [("Host", mine), ("Origin", f"http://{mine}")])[0]
        status, _, body = ask(gw.port, [("Host", mine), ("Origin", f"https://{mine}")])
        # A proxy on this machine (trusted by uvicorn) says the page came over https.
        proxied = ask(
            gw.port,
            [("Host", mine), ("Origin", f"https://{mine}"), ("X-Forwarded-Proto", "https")],
        )[0]
    assert (plain, status, proxied) == (200, 403, 200)
    assert error_of(body)["code"] == "origin_not_allowed"


@pytest.mark.integration
def test_several_origins_pass_only_if_every_one_would(lab: LabServer) -> None:
    config = gateway_config(upstream(lab, "lab"), cors={"allow_origins": [ALLOWED]})
    with GatewayServer(config) as gw:
        host = ("Host", f"127.0.0.1:{gw.port}")
        other_first, _, body = ask(gw.port, [host, ("Origin", OTHER), ("Origin", ALLOWED)])
        allowed_first = ask(gw.port, [host, ("Origin", ALLOWED), ("Origin", OTHER)])[0]
        both, headers, _ = ask(gw.port, [host, ("Origin", ALLOWED), ("Origin", ALLOWED)])
    assert (other_first, allowed_first, both) == (403, 403, 200)
    assert OTHER in error_of(body)["message"]
    assert headers["access-control-allow-origin"] == ALLOWED


# -- the rule itself ----------------------------------------------------------------------------


def scope(ip: str, port: int, scheme: str = "http") -> dict[str, Any]:
    return {"type": "http", "server": (ip, port), "scheme": scheme}


def test_host_is_checked_on_loopback_and_where_the_operator_lists_names() -> None:
    open_hosts = ServedHosts((), ("0.0.0.0", 8080))
    on_network = scope("10.0.0.5", 8080)
    # Reached over the network, the gateway cannot know its names (a balancer's, a DNS name).
    assert open_hosts.refused(on_network, ["anything.example:8080"]) is None
    # ...but only its own address is its own origin.
    assert open_hosts.is_own_origin(on_network, ["10.0.0.5:8080"], "http://10.0.0.5:8080")
    assert not open_hosts.is_own_origin(
        on_network, ["evil.example:8080"], "http://evil.example:8080"
    )
    two = ["10.0.0.5:8080", "10.0.0.5:8080"]  # which one the browser meant: not said
    assert not open_hosts.is_own_origin(on_network, two, "http://10.0.0.5:8080")
    # A gateway on 0.0.0.0 reached through 127.0.0.1 (or its IPv6 mapping) is on loopback.
    assert open_hosts.refused(scope("127.0.0.1", 8080), ["evil.example:8080"]) is not None
    mapped = scope("::ffff:127.0.0.1", 8080)
    assert open_hosts.refused(mapped, ["127.0.0.1:8080", "[::ffff:127.0.0.1]:8080"]) is None
    assert open_hosts.refused(mapped, ["evil.example:8080"]) == "evil.example:8080"
    listed = ServedHosts(("gw.example.test",), ("0.0.0.0", 8080))
    assert listed.refused(on_network, ["anything.example:8080"]) == "anything.example:8080"
    assert listed.refused(on_network, ["gw.example.test", "10.0.0.5:8080"]) is None
    anyone = ServedHosts(("*",), ("0.0.0.0", 8080))
    assert anyone.refused(scope("127.0.0.1", 8080), ["evil.example:8080"]) is None
    v6 = ServedHosts(("[fd00::5]",), ("::", 8080))
    assert v6.refused(scope("::1", 8080), ["[fd00::5]:8443", "[::1]:8080"]) is None
    assert v6.refused(scope("::1", 8080), ["[fd00::6]:8080"]) == "[fd00::6]:8080"


def test_on_the_schemes_own_port_a_host_may_leave_the_port_out() -> None:
    hosts = ServedHosts((), ("127.0.0.1", 80))
    assert hosts.refused(scope("127.0.0.1", 80), ["localhost", "127.0.0.1:80"]) is None
    assert hosts.refused(scope("127.0.0.1", 443, "https"), ["localhost"]) is None
    # Off loopback only the address and port it came in on (the names listed aside).
    listed = ServedHosts(("gw.example",), ("0.0.0.0", 80))
    assert listed.refused(scope("10.0.0.5", 80), ["10.0.0.5"]) is None
    assert listed.refused(scope("10.0.0.5", 8080), ["10.0.0.5"]) == "10.0.0.5"
    # A scope that does not say where it came in: the configured address.
    assert hosts.refused({"type": "http"}, ["localhost"]) is None
    named = ServedHosts((), ("gateway.internal", 8080))  # a name, not an address
    assert named.refused({"type": "http"}, ["other:8080"]) is None  # not known as loopback
    assert named.own_names({"type": "http"}) == "gateway.internal:8080"


def test_allowed_hosts_are_checked_like_every_key() -> None:
    config = gateway_config(
        {"name": "u", "base_url": "http://127.0.0.1:1/v1"},
        server={"allowed_hosts": ["GW.Example.test", "[::1]:8080", "*", "my_gateway"]},
    )
    assert config.server.allowed_hosts == ("gw.example.test", "[::1]:8080", "*", "my_gateway")
    for bad in ("http://gw.example.test", "gw.example.test/v1", "gw:99999", "a b", "gw\n"):
        with pytest.raises(ConfigError, match=r"server\.allowed_hosts"):
            gateway_config(
                {"name": "u", "base_url": "http://127.0.0.1:1/v1"},
                server={"allowed_hosts": [bad]},
            )


def test_the_addresses_remembered_are_bounded() -> None:
    hosts = ServedHosts((), ("127.0.0.1", 8080))
    for port in range(1000, 1300):
        assert hosts.refused(scope("127.0.0.1", port), [f"localhost:{port}"]) is None
    assert 0 < len(hosts._addresses) <= 64
