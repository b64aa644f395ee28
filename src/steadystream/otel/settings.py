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
- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``..._METRICS_ENDPOINT`` and
  ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``/``..._METRICS_HEADERS``: one signal's own, in place of
  the common ones for that signal (a signal's endpoint is its whole URL: nothing is added to
  it); checked as the common ones are. A signal endpoint alone turns telemetry on;
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
    signal_endpoints: Mapping[str, str] = field(default_factory=dict)
    """A signal's own URL, taken as it is (``traces``, ``metrics``)."""
    signal_headers: Mapping[str, Mapping[str, str]] = field(default_factory=dict, repr=False)
    """A signal's own headers, in place of :attr:`headers` for it."""
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
        for signal, url in self.signal_endpoints.items():
            _check_signal(signal, "endpoint")
            check_endpoint(url)
        self._check_headers(self.headers, "OTLP headers")
        for signal, headers in self.signal_headers.items():
            _check_signal(signal, "headers")
            self._check_headers(headers, f"OTLP {signal} headers")

    def _check_headers(self, headers: Mapping[str, str], source: str) -> None:
        for position, (name, value) in enumerate(headers.items(), start=1):
            _check_header(name, value, position, source)
            if self.protocol == "grpc" and not _GRPC_KEY.match(name.lower()):
                raise ConfigError(
                    f"{source}: member {position}: gRPC metadata names are letters, digits"
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
        """The URL one signal is sent to: its own, else (HTTP/protobuf) the base and
        ``/v1/<signal>``."""
        own = self.signal_endpoints.get(signal)
        if own is not None:
            return own
        if self.protocol == "grpc":
            return self.endpoint
        return f"{self.endpoint.rstrip('/')}/v1/{signal}"

    def signal_headers_for(self, signal: Literal["traces", "metrics"]) -> Mapping[str, str]:
        """The headers one signal is sent with: its own, else the common ones."""
        return self.signal_headers.get(signal, self.headers)


_SIGNALS = ("traces", "metrics")


def _check_signal(signal: str, what: str) -> None:
    if signal not in _SIGNALS:
        raise ConfigError(
            f"OTLP signal {what}: unknown signal {signal!r} (accepted: traces, metrics)"
        )


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
    own = {  # (an endpoint the configuration names wins over all of the environment's)
        signal: url
        for signal in _SIGNALS
        if not endpoint and (url := env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"))
    }
    only_own = not endpoint and not env.get("OTEL_EXPORTER_OTLP_ENDPOINT") and bool(own)
    if only_own:
        # (a signal's endpoint alone: the other signal has none, and is not sent)
        endpoint = next(iter(own.values()))
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
        signal_endpoints=own,
        signal_headers={
            signal: _pairs(env[name], name, headers=True)
            for signal in _SIGNALS
            if (name := f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS") in env
        },
        max_queue_spans=max_queue_spans,
        metrics_interval_ms=metrics_interval_ms,
        traces=_sent(env, "traces", own, only_own),
        metrics=_sent(env, "metrics", own, only_own),
    )


def _sent(env: Mapping[str, str], signal: str, own: Mapping[str, str], only_own: bool) -> bool:
    """Whether ``signal`` is exported: not ``OTEL_<SIGNAL>_EXPORTER=none``, and somewhere to
    send it (when only signal endpoints are set, only those signals are)."""
    if env.get(f"OTEL_{signal.upper()}_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return signal in own or not only_own


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
