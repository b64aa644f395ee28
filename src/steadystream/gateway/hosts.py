"""The names the gateway answers to: its own address, and the names its operator lists.

A browser decides what a page may read by origin, and an origin is a name, not an address.
A page on ``http://evil.example:8080`` whose owner points ``evil.example`` at 127.0.0.1 (DNS
rebinding) is on the same origin as a gateway listening on 127.0.0.1:8080: its requests
reach the gateway with ``Host: evil.example:8080``, and it may read every answer. So on a
connection that came in on a loopback address, Host must name the gateway: 127.0.0.1,
localhost or [::1], or a name in ``server.allowed_hosts`` (docs/gateway.md#hosts). Any port:
a port forward (``ssh -L``, a local TCP relay) changes the port and not the name, and a
rebinding needs a name its attacker owns; which origin a page is on still includes the
port. Elsewhere (a gateway on 0.0.0.0 reached over the network, behind a load balancer whose
names it cannot know) Host is checked only once ``allowed_hosts`` lists names.

What the gateway serves is read from the connection (the ASGI scope's ``server``, the
address and port the request came in on): the configuration may say port 0, or 0.0.0.0.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from starlette.types import Scope

__all__ = ["ServedHosts"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_DEFAULT_PORT = {"http": 80, "https": 443}
# Addresses a gateway is reached on: its few own, so a small bound that is never reached
# in practice (past it, the table starts again rather than grow).
_MAX_ADDRESSES = 64


class _Address:
    """What one local address (and scheme) means for Host: checked or not, and its own names
    (``own``: with the port; ``any_port``: names that are its own with any port)."""

    __slots__ = ("any_port", "checked", "own", "shown")

    def __init__(
        self, checked: bool, own: frozenset[str], any_port: frozenset[str], shown: str
    ) -> None:
        self.checked = checked
        self.own = own
        self.any_port = any_port
        self.shown = shown  # the own names, for an error message


class ServedHosts:
    """Whether a request's ``Host`` names this gateway (see the module docstring).

    ``allowed_hosts`` are names (any port) or ``name:port`` (that port only), lowercase, or
    ``*`` (every Host: the check off); ``fallback`` is the configured address, for a scope
    that does not say which address it came in on.
    """

    def __init__(self, allowed_hosts: Sequence[str], fallback: tuple[str, int]) -> None:
        self.any = "*" in allowed_hosts
        self.listed = bool(allowed_hosts)
        self._names = frozenset(h for h in allowed_hosts if _port_of(h) is None)
        self._with_port = frozenset(h for h in allowed_hosts if _port_of(h) is not None)
        self._fallback = fallback
        self._addresses: dict[tuple[str, int, str], _Address] = {}

    def refused(self, scope: Scope, hosts: Sequence[str]) -> str | None:
        """The first of ``hosts`` (a request's Host values) the gateway must not answer, if any.

        A request without Host passes: no browser sends one, so it cannot be a rebound
        page's (HTTP/1.0 tools may leave it out).
        """
        if self.any or not hosts:
            return None
        address = self._address(scope)
        if not address.checked:
            return None
        for host in hosts:
            if not self._serves(address, host.lower()):
                return host
        return None

    def own_names(self, scope: Scope) -> str:
        """The Host values that name the gateway on this connection, for an error message."""
        return self._address(scope).shown

    def is_own_origin(self, scope: Scope, hosts: Sequence[str], origin: str) -> bool:
        """Whether ``origin`` is the gateway's own: its scheme (the connection's, or the one a
        trusted proxy forwarded) and a Host that names the gateway, port included."""
        if len(hosts) != 1:
            return False
        host = hosts[0].lower()
        return origin.lower() == f"{scope.get('scheme', 'http')}://{host}" and self._serves(
            self._address(scope), host
        )

    def _serves(self, address: _Address, host: str) -> bool:
        if host in address.own or host in self._with_port:
            return True
        name = _name_of(host)
        return name in address.any_port or name in self._names

    def _address(self, scope: Scope) -> _Address:
        server = scope.get("server")
        ip, port = (server[0], server[1]) if server and server[1] is not None else self._fallback
        scheme = scope.get("scheme", "http")
        key = (ip, port, scheme)
        address = self._addresses.get(key)
        if address is None:
            if len(self._addresses) >= _MAX_ADDRESSES:
                self._addresses.clear()
            address = self._addresses[key] = self._describe(ip, port, scheme)
        return address

    def _describe(self, ip: str, port: int, scheme: str) -> _Address:
        names, loopback = _names_of(ip)
        if loopback:
            names += [n for n in _LOOPBACK_NAMES if n not in names]
        own = {f"{name}:{port}" for name in names}
        if _DEFAULT_PORT.get(scheme) == port:
            own.update(names)  # a browser leaves the scheme's own port out of Host
        any_port = frozenset(names) if loopback else frozenset()
        shown = ", ".join(names if loopback else sorted(own))
        return _Address(loopback or self.listed, frozenset(own), any_port, shown)


def _names_of(ip: str) -> tuple[list[str], bool]:
    """How a Host header writes an address (an IPv4 one mapped into IPv6 both ways), and
    whether it is a loopback address."""
    try:
        parsed = ipaddress.ip_address(ip)
    except ValueError:  # not an address (a Unix socket's path, say): a name as it is
        return [ip.lower()], False
    if isinstance(parsed, ipaddress.IPv6Address):
        # as given, and as browsers write it (::ffff:127.0.0.1 becomes ::ffff:7f00:1)
        names = list(dict.fromkeys((f"[{ip.lower()}]", f"[{parsed.compressed}]")))
        mapped = parsed.ipv4_mapped
        if mapped is not None:
            return [str(mapped), *names], mapped.is_loopback
        return names, parsed.is_loopback
    return [str(parsed)], parsed.is_loopback


def _name_of(host: str) -> str:
    """``host`` without its port: ``[::1]:8080`` -> ``[::1]``, ``a.example:80`` -> ``a.example``."""
    if host.startswith("["):
        return host[: host.find("]") + 1] or host
    return host.partition(":")[0]


def _port_of(host: str) -> str | None:
    rest = host[host.find("]") + 1 :] if host.startswith("[") else host
    _, colon, port = rest.partition(":")
    return port if colon else None
