"""Whether telemetry is on, and where it goes: the standard ``OTEL_*`` environment, under what
a configuration file or an option says.

Read here (the OpenTelemetry SDK's own names and meanings):

- ``OTEL_SDK_DISABLED=true``: off, whatever else is set;
- ``OTEL_EXPORTER_OTLP_ENDPOINT``: the collector; telemetry is on when it is set (or when the
  configuration names an endpoint). gRPC takes it as it is; HTTP/protobuf adds ``/v1/traces``
  and ``/v1/metrics`` to it;
- ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``grpc`` or ``http/protobuf`` (the default, as the
  specification advises); ``http/json`` has no Python exporter and is refused;
- ``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value,...`` (values percent-decoded), sent with
  every export. They usually hold a collector's key: they are kept out of ``repr`` and of
  every message here, and a malformed one is refused here, naming its member's number, before
  the SDK could log it. Names are RFC 9110 tokens, values printable ASCII;
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (``key=value,...``): the resource;
- ``OTEL_TRACES_EXPORTER=none`` or ``OTEL_METRICS_EXPORTER=none``: that signal is not sent
  (a collector that takes only traces, such as Arize Phoenix); any other value is OTLP.

The endpoint is checked as a URL (:func:`check_endpoint`): scheme, host, a port in 1-65535,
no query or fragment; a password in it (``http://user:pw@host``) is never shown
(:func:`~steadystream._validation.shown_url`).

Pure: it reads the mapping it is handed, never ``os.environ`` by itself, and imports nothing
of OpenTelemetry.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from steadystream._exceptions import ConfigError
from steadystream._validation import shown_url, url_problem

__all__ = [
    "PROTOCOLS",
    "OtelSettings",
    "Protocol",
    "check_endpoint",
    "endpoint_problem",
    "resolve_settings",
]

Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
# RFC 9110 5.6.2: a header name is a token.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Printable ASCII: no control character (CR, LF, NUL...), which requests and gRPC refuse
# with the value in their message.
_VALUE = re.compile(r"^[\x20-\x7e]*$")
# gRPC metadata keys (lower-cased before they are sent).
_GRPC_KEY = re.compile(r"^[0-9a-z_.-]+$")


@dataclass(frozen=True, slots=True)
class OtelSettings:
    """Where spans and metrics go and how they are held on the way."""

    endpoint: str
    protocol: Protocol = "http/protobuf"
    service_name: str = "steadystream"
    resource: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets
    max_queue_spans: int = 2048
    """Spans waiting for export at most; more are dropped and counted, never waited for."""
    span_delay_ms: int = 1000
    """How long a finished span may wait before its batch is sent."""
    metrics_interval_ms: int = 10_000
    """How often the metrics are exported."""
    traces: bool = True  # spans are sent (OTEL_TRACES_EXPORTER is not none)
    metrics: bool = True  # metrics are sent (OTEL_METRICS_EXPORTER is not none)

    export_timeout_ms: int = 2000
    """How long one export may take, its retries included (the SDK's default is 10 s, and its
    metric reader's 30 s): a collector that never answers costs this, not minutes."""
    shutdown_timeout_ms: int = 5000
    """How long shutting down may take in all, the last spans and metrics sent included."""

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint)
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"OTLP protocol {self.protocol!r}: accepted: {', '.join(PROTOCOLS)}")
        for name in (
            "max_queue_spans",
            "span_delay_ms",
            "metrics_interval_ms",
            "export_timeout_ms",
            "shutdown_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"OTLP {name}: must be at least 1")
        for position, (name, value) in enumerate(self.headers.items(), start=1):
            _check_header(name, value, position, "OTLP headers")
            if self.protocol == "grpc" and not _GRPC_KEY.match(name.lower()):
                raise ConfigError(
                    f"OTLP headers: member {position}: gRPC metadata names are letters, digits"
                    " and _ . - only"
                )

    def __repr__(self) -> str:
        # The headers are secrets; a password in the endpoint is one too.
        return (
            f"OtelSettings(endpoint={shown_url(self.endpoint)!r},"
            f" protocol={self.protocol!r}, service_name={self.service_name!r},"
            f" traces={self.traces}, metrics={self.metrics})"
        )

    def signal_endpoint(self, signal: Literal["traces", "metrics"]) -> str:
        """The URL one signal is sent to (HTTP/protobuf: the base and ``/v1/<signal>``)."""
        if self.protocol == "grpc":
            return self.endpoint
        return f"{self.endpoint.rstrip('/')}/v1/{signal}"


def resolve_settings(
    env: Mapping[str, str],
    *,
    enabled: bool | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    service_name: str | None = None,
    resource: Mapping[str, str] | None = None,
    default_service: str = "steadystream",
    max_queue_spans: int = 2048,
    metrics_interval_ms: int = 10_000,
) -> OtelSettings | None:
    """The settings, or None when telemetry is off.

    The keyword arguments are what a configuration file or option said; each wins over its
    environment variable. ``enabled``: None means on exactly when an endpoint is known;
    False is off; True without any endpoint is a :class:`ConfigError`.
    """
    if _true(env.get("OTEL_SDK_DISABLED", "")) or enabled is False:
        return None
    endpoint = endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if endpoint is None:
        if enabled:
            raise ConfigError(
                "otel: telemetry is enabled but no endpoint is set (otel.endpoint, or"
                " OTEL_EXPORTER_OTLP_ENDPOINT)"
            )
        return None
    chosen = protocol or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if chosen not in PROTOCOLS:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL (or otel.protocol) {chosen!r}: accepted:"
            f" {', '.join(PROTOCOLS)} (http/json has no Python exporter)"
        )
    attributes = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES")
    attributes.update(resource or {})
    name = (
        service_name
        or env.get("OTEL_SERVICE_NAME")
        or attributes.get("service.name")
        or default_service
    )
    attributes["service.name"] = name
    return OtelSettings(
        endpoint=endpoint,
        protocol=chosen,
        service_name=name,
        resource=attributes,
        headers=_pairs(
            env.get("OTEL_EXPORTER_OTLP_HEADERS", ""), "OTEL_EXPORTER_OTLP_HEADERS", headers=True
        ),
        max_queue_spans=max_queue_spans,
        metrics_interval_ms=metrics_interval_ms,
        traces=env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none",
        metrics=env.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() != "none",
    )


def _true(value: str) -> bool:
    return value.strip().lower() == "true"


def check_endpoint(url: str) -> str:
    """``url`` if it is a collector's URL (``http(s)://host[:port][/path]``), else a
    :class:`ConfigError` that says why, showing the URL without its password."""
    problem = endpoint_problem(url)
    if problem is not None:
        raise ConfigError(f"OTLP endpoint {shown_url(url)!r}: {problem}")
    return url


def endpoint_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a collector's URL (None: nothing); never quotes it."""
    return url_problem(
        url,
        ("http", "https"),
        no_query="the signal path is added to it",
        not_scheme="not an http:// or https:// URL (such as http://127.0.0.1:4318)",
    )


def _check_header(name: str, value: str, position: int, source: str) -> None:
    """A :class:`ConfigError` for a header the exporters could not send; it names the
    member's position only: the value (and a name, which may be a pasted key) is a secret."""
    if not _TOKEN.match(name):
        raise ConfigError(
            f"{source}: member {position}: the name is not an HTTP header name (letters, digits"
            " and !#$%&'*+-.^_`|~, no spaces)"
        )
    if not _VALUE.match(value):
        raise ConfigError(
            f"{source}: member {position}: the value has a control or non-ASCII character"
            " (after percent-decoding)"
        )


def _pairs(text: str, variable: str, *, headers: bool = False) -> dict[str, str]:
    """``key=value,key2=value2`` (W3C baggage-like, values percent-encoded), as the SDK reads
    it; a member without ``=`` is an error that names the variable and the member's number,
    never its text. With ``headers``, each must be a header the exporters can send (an RFC
    9110 token, a printable ASCII value)."""
    pairs: dict[str, str] = {}
    for position, member in enumerate(text.split(","), start=1):
        if not member.strip():
            continue
        key, sep, value = member.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"{variable}: member {position} is not key=value (members are separated by commas)"
            )
        key, value = urllib.parse.unquote(key), urllib.parse.unquote(value.strip())
        if headers:
            _check_header(key, value, position, variable)
        pairs[key] = value
    return pairs
