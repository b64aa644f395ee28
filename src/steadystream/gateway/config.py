"""The gateway's configuration: a YAML file validated into small frozen pydantic models.

docs/gateway.md documents every key with its type and default. Durations are written as
people type them (``1.5s``, ``400ms``; a bare number is seconds) and held as integer
nanoseconds; sizes take ``KiB``/``MiB`` suffixes or a plain byte count. Anything wrong is
reported as one :class:`~steadystream.ConfigError` that names the key and what it accepts.

Secrets are never written in this file's models: upstream and tenant keys are named by the
environment variables that hold them and are read when the app is built
(:mod:`steadystream.gateway.auth`, :mod:`steadystream.gateway.upstreams`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from steadystream._exceptions import ConfigError, SpecError
from steadystream._validation import (
    ConfigErrorWhenCalled,
    Duration,
    Screen,
    Workers,
    as_written,
    describe_errors,
    shown_url,
    url_problem,
    usable_cores,
)
from steadystream._yaml import load_yaml
from steadystream.gateway._fields import (
    HOST,
    MOST_BYTES,
    NAME,
    OWNED_HEADERS,
    BaseUrl,
    EnvName,
    EnvNames,
    HeaderName,
    HeaderValue,
    Size,
    headers_problem,
)
from steadystream.otel.settings import endpoint_problem
from steadystream.protocol.apis import Api

__all__ = [
    "CorsConfig",
    "FailoverConfig",
    "GatewayConfig",
    "GlassConfig",
    "LimitsConfig",
    "OtelConfig",
    "PacingConfig",
    "RecordingConfig",
    "ResumeConfig",
    "ServerConfig",
    "TenantConfig",
    "UpstreamConfig",
    "UpstreamTimeouts",
    "WatchdogConfig",
    "config_from_mapping",
    "config_from_upstreams",
    "load_config",
    "with_pacing_and_recording",
    "with_server",
]

_NUMBER_LISTS = (tuple[int, ...], tuple[float, ...], list[int], list[float])


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_true_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic takes true for 1 and false for 0 where a number is asked: `port: true`
        # or `max_attempts: yes` is a slip, never meant as 1.
        # (A union, such as server.workers' number or auto, says so in its own words.)
        if info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, bool) and annotation in (int, float):
            raise ValueError(f"a number, not {str(value).lower()}")
        if (
            isinstance(value, (list, tuple))
            and annotation in _NUMBER_LISTS
            and any(isinstance(item, bool) for item in value)
        ):
            raise ValueError("a list of numbers, not of true or false")
        return value


class ServerConfig(_Section):
    """Where the gateway listens."""

    host: str = Field(
        "127.0.0.1",
        description="bind address; loopback unless told otherwise (0.0.0.0 or :: for every"
        " interface; never empty)",
    )
    port: int = Field(8080, ge=0, le=65535, description="TCP port (0: any free port)")
    metrics_auth: bool = Field(
        True,
        description="with tenants configured, /metrics and /healthz need a gateway key too"
        " (they name tenants, models and upstreams); false leaves them open",
    )
    header_timeout: Duration = Field(
        10_000_000_000,
        gt=0,
        description="a connection that has not sent a whole request head this long is closed",
    )
    body_timeout: Duration = Field(
        30_000_000_000, gt=0, description="the longest wait for a request body to arrive"
    )
    workers: Workers = Field(
        1,
        description="processes serving the one port, each with its own event loop; auto: one"
        " per core",
    )
    allowed_hosts: tuple[str, ...] = Field(
        (),
        description="names it answers to besides its own address (Host: a name, any port, or"
        " name:port; * for any): needed on loopback behind a proxy or a tunnel that renames it",
    )

    @field_validator("host")
    @classmethod
    def _bind_address(cls, value: str) -> str:
        # "" binds every interface, while the Host check takes it for loopback.
        if not value or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(
                "an address to bind, such as 127.0.0.1 (0.0.0.0 or :: for every interface)"
            )
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            match = HOST.fullmatch(host)
            if host != "*" and (match is None or int(match["port"] or 0) > 65535):
                raise ValueError(
                    f"{host!r} is not a host (a name or address as a Host header writes it,"
                    " with or without :port; an IPv6 address in brackets) or *"
                )
        return tuple(host.lower() for host in value)

    @property
    def worker_count(self) -> int:
        """``workers`` as a number: ``auto`` is the cores this process may run on."""
        if self.workers == "auto":
            return usable_cores()
        return self.workers


class UpstreamTimeouts(_Section):
    """Per-upstream timeouts; the watchdog's two default to the ``watchdog`` section."""

    connect: Duration = Field(5_000_000_000, gt=0, description="TCP (and TLS) connect")
    first_token: Duration | None = Field(None, gt=0, description="override of the watchdog's")
    stall: Duration | None = Field(None, gt=0, description="override of the watchdog's")
    request: Duration = Field(600_000_000_000, gt=0, description="a whole non-streaming request")


class UpstreamConfig(_Section):
    """One provider or engine the gateway forwards to."""

    name: str
    base_url: BaseUrl = Field(
        description="the OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (a host; no query or"
        " fragment: the API path is added after it)"
    )
    api_key_env: EnvName | None = Field(
        None, description="the name of the environment variable holding its key"
    )
    models: tuple[str, ...] = Field((), description="models it serves; empty: any model")
    model_map: dict[str, str] = Field(
        default_factory=dict, description="gateway model name -> the name this upstream uses"
    )
    priority: int = Field(
        0,
        ge=-1_000_000,
        le=1_000_000,
        description="lower is tried first; ties keep file order (-1000000 to 1000000)",
    )
    chat_continuation: Literal["vllm", "prefix", "none"] = Field(
        "vllm", description="how it continues an assistant prefix (failover policy continue)"
    )
    headers: Annotated[dict[HeaderName, HeaderValue], Screen(headers_problem)] = Field(
        default_factory=dict,
        description="sent with every request (values without CR, LF or NUL; never quoted)",
    )
    forward_headers: tuple[HeaderName, ...] = Field((), description="client headers passed on")
    # llama-cpp-python's server refuses any X-Request-Id that is not a UUID (docs/engines.md).
    request_id_header: HeaderName | None = Field(
        "X-Request-Id", description="header carrying the request id upstream; null: none"
    )
    timeouts: UpstreamTimeouts = UpstreamTimeouts()
    dialects: tuple[Api, ...] | None = Field(
        None,
        description="the APIs it speaks; null: whatever the client used (passthrough). A"
        " Responses or Messages client is translated into chat for an upstream that lists chat"
        " and not the client's",
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError("use letters, digits, '.', '_' and '-' (it becomes a metric label)")
        return value

    @field_validator("dialects")
    @classmethod
    def _some_dialects(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        if not value:
            raise ValueError(
                "name at least one of chat, completions, responses, messages (or leave it out:"
                " the upstream speaks whatever the client does)"
            )
        twice = sorted({name for name in value if value.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} named twice")
        return value

    @field_validator("headers", "forward_headers")
    @classmethod
    def _not_owned(cls, value: Any) -> Any:
        # The error does not quote ``headers`` (a mapping: its values may be keys).
        for name in value:
            if name.lower() in OWNED_HEADERS:
                raise ValueError(
                    f"{name!r} is set by the gateway (keys: api_key_env; framing and "
                    "connection headers: the HTTP client), not here"
                )
        return value

    @field_validator("base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    def serves(self, model: str) -> bool:
        return not self.models or model in self.models

    def upstream_model(self, model: str) -> str:
        return self.model_map.get(model, model)


class TenantConfig(_Section):
    """A team or app: the gateway keys that identify it, what it may use, how it is paced."""

    name: str
    api_key_env: EnvNames = Field(
        (),
        description="the names of environment variables, each holding one gateway key of this"
        " tenant",
    )
    models: tuple[str, ...] = Field((), description="models it may use; empty: all")
    pacer: str | None = Field(None, description="pacer spec for its streams, e.g. leaky")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError("use letters, digits, '.', '_' and '-' (it becomes a metric label)")
        return value

    @field_validator("pacer")
    @classmethod
    def _pacer_spec(cls, value: str | None) -> str | None:
        return _check_pacer(value)


class WatchdogConfig(_Section):
    """Timeouts measured on upstream bytes that carry tokens (never keepalives or writes)."""

    first_token_timeout: Duration = Field(
        30_000_000_000, gt=0, description="from request sent to the first token"
    )
    stall_timeout: Duration = Field(
        1_500_000_000, gt=0, description="longest silence between two tokens"
    )
    give_up_timeout: Duration = Field(
        30_000_000_000,
        gt=0,
        description="with nowhere to fail over to, the longest silence waited out before the"
        " stream ends with an in-band error (failover.wait_without_fallback)",
    )
    finish_timeout: Duration = Field(
        5_000_000_000,
        gt=0,
        description="after a finish reason, the longest wait for [DONE] or the close before"
        " the gateway ends the stream itself",
    )


class FailoverConfig(_Section):
    """What happens when an upstream fails (docs/gateway.md#failover)."""

    policy: Literal["continue", "regenerate", "off"] = Field(
        "continue", description="mid-stream: continue, regenerate or off"
    )
    before_first_token: bool = Field(True, description="retry on the next upstream")
    max_attempts: int = Field(3, ge=1, le=16, description="upstream attempts per request")
    wait_without_fallback: bool = Field(
        True,
        description="mid-stream, when there is no upstream to fail over to, a stall is counted"
        " and waited out (up to watchdog.give_up_timeout) instead of ending the stream"
        " (policy off still ends it)",
    )
    retry_statuses: tuple[int, ...] = Field(
        (408, 429, 500, 502, 503, 504, 529),
        description="statuses that try the next upstream (529: Anthropic's overloaded); each"
        " 100-599",
    )

    @field_validator("retry_statuses")
    @classmethod
    def _statuses(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 100 <= status <= 599 for status in value):
            raise ValueError("an HTTP status is 100 to 599")
        return value


class PacingConfig(_Section):
    """Pacers by route; tenants and requests may choose their own."""

    default: str | None = Field(None, description="pacer spec for every stream (None: none)")
    routes: dict[Literal["chat", "completions"], str | None] = Field(
        default_factory=dict, description="pacer spec per route, over the default"
    )
    allow_header: bool = Field(True, description="honour X-Steadystream-Pacer on requests")

    @field_validator("default")
    @classmethod
    def _pacer_spec(cls, value: str | None) -> str | None:
        return _check_pacer(value)

    @field_validator("routes")
    @classmethod
    def _route_specs(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for spec in value.values():
            _check_pacer(spec)
        return value


class RecordingConfig(_Section):
    """Both-edge timelines of every stream, to rotating JSONL files."""

    enabled: bool = False
    directory: str = Field("gateway-recordings", description="where the files go")
    keep_text: bool = Field(False, description="store the answers' text (prompts never)")
    rotate_streams: int = Field(
        10_000, ge=1, le=100_000_000, description="streams per file before a new one (at most 1e8)"
    )
    keep_files: int = Field(
        20,
        ge=1,
        le=1_000_000,
        description="files kept per process, ended processes' counted in; older ones are deleted"
        " (at most 1e6)",
    )
    engine_metrics: bool = Field(
        False, description="scrape each upstream's /metrics every 100 ms into the directory"
    )


class LimitsConfig(_Section):
    """Bounds on what one request may cost."""

    max_body_bytes: Size = Field(
        1_048_576, ge=1, le=MOST_BYTES, description="larger request bodies get 413 (at most 1TiB)"
    )
    buffer_bytes: Size = Field(
        262_144,
        ge=1024,
        le=MOST_BYTES,
        description="upstream bytes held for a slow client before reading stops (at most 1TiB)",
    )
    buffer_events: int = Field(
        512, ge=1, le=1_000_000, description="events held for a slow client (at most 1e6)"
    )
    max_event_bytes: Size = Field(
        1_048_576,
        ge=1024,
        le=MOST_BYTES,
        description="an upstream SSE event larger than this fails its stream (at most 1TiB)",
    )
    max_stream_events: int = Field(
        1_000_000,
        ge=1,
        le=10**12,
        description="an upstream stream of more events than this ends in-band"
        " (stream_too_long): an upstream that never stops would grow what the gateway keeps"
        " of each event without end (at most 1e12)",
    )
    max_response_bytes: Size = Field(
        16_777_216,
        ge=1024,
        le=MOST_BYTES,
        description="a larger non-streaming upstream answer is refused (at most 1TiB)",
    )
    max_model_labels: int = Field(
        100,
        ge=1,
        le=100_000,
        description="distinct model label values in metrics; models past it (and models no"
        " upstream names) are counted as 'other' (at most 100000: each is a series per metric)",
    )
    stuck_timeout: Duration = Field(
        30_000_000_000, gt=0, description="a client that drains nothing this long is cut"
    )
    keepalive_interval: Duration = Field(
        15_000_000_000, gt=0, description="SSE comment while waiting for the first token"
    )
    client_send_buffer: Size | None = Field(
        65_536,
        ge=4096,
        le=2**31 - 1,
        description="kernel send buffer of each client connection (None: kernel autotuning;"
        " at most 2**31-1, the largest the socket option takes)",
    )
    max_connections: int = Field(
        1_000, ge=1, le=1_000_000, description="open upstream connections in all (at most 1e6)"
    )
    pacer_high_watermark: int = Field(
        50, ge=1, le=1_000_000, description="tokens a pacer holds before pausing (at most 1e6)"
    )
    pacer_low_watermark: int = Field(
        20, ge=0, le=1_000_000, description="tokens at which reading resumes"
    )


_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")
_CORS_METHODS = frozenset({"GET", "POST", "DELETE", "OPTIONS"})


class CorsConfig(_Section):
    """Which pages on other origins may call the gateway from a browser (docs/gateway.md)."""

    allow_origins: tuple[str, ...] = Field(
        (), description="origins such as https://app.example.com, or * (none: CORS off)"
    )
    allow_methods: tuple[str, ...] = Field(("GET", "POST"), description="methods they may use")
    allow_headers: tuple[HeaderName, ...] = Field(
        ("authorization", "content-type", "x-request-id", "idempotency-key", "last-event-id"),
        description="request headers they may send (the last two: resume)",
    )
    expose_headers: tuple[HeaderName, ...] = Field(
        ("x-request-id", "x-steadystream-stream-id"),
        description="response headers their scripts may read",
    )
    allow_credentials: bool = Field(False, description="let them send cookies (not with *)")
    max_age: int = Field(600, ge=0, le=86_400, description="seconds a preflight is cached")
    refuse_other_origins: bool = Field(
        True, description="403 for a request from an origin not allowed, before any upstream work"
    )

    @field_validator("allow_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for origin in value:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"{origin!r} is not an origin (scheme://host[:port], no path) or *"
                )
        return value

    @field_validator("allow_methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for method in value:
            if method not in _CORS_METHODS:
                raise ValueError(f"{method!r}: accepted: {', '.join(sorted(_CORS_METHODS))}")
        return value

    @model_validator(mode="after")
    def _no_credentials_with_any(self) -> CorsConfig:
        if self.allow_credentials and "*" in self.allow_origins:
            raise ValueError("allow_credentials cannot be used with the origin *")
        return self


class GlassConfig(_Section):
    """Timelines posted by pages' glass probes (docs/glass.md), recorded in their own files
    beside the streams', each bound to an answer the poster was served (its token)."""

    accept: bool = Field(False, description="take posts at /steadystream/glass")
    max_body_bytes: Size = Field(
        1_048_576, ge=1024, le=MOST_BYTES, description="larger posts get 413 (at most 1TiB)"
    )
    max_events: int = Field(
        20_000, ge=1, le=100_000_000, description="arrivals or frames per post (at most 1e8)"
    )
    token_ttl: Duration = Field(
        600_000_000_000,
        ge=1_000_000_000,
        le=86_400_000_000_000,
        description="how long after its answer started a page may post its report",
    )
    secret_env: EnvName | None = Field(
        None,
        description="environment variable holding the token secret (32 bytes or more), to"
        " share tokens between replicas and restarts; unset: a random one per gateway",
    )
    client_reports_per_s: float = Field(
        10.0, gt=0, le=1e6, description="reports a second per client (tenant, or address)"
    )
    client_report_burst: int = Field(
        50, ge=1, le=1_000_000, description="reports a client may send at once (at most 1e6)"
    )
    client_bytes_per_s: Size = Field(
        524_288,
        ge=1,
        le=MOST_BYTES,
        description="report bytes a second per client (tenant, or address; at most 1TiB)",
    )
    client_byte_burst: Size = Field(
        4_194_304,
        ge=1024,
        le=MOST_BYTES,
        description="report bytes a client may send at once (at most 1TiB)",
    )
    max_clients: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="clients whose budgets are kept (the least recent go; at most 1e7)",
    )
    max_disk_bytes: Size = Field(
        1_073_741_824,
        ge=1_048_576,
        le=2**50,
        description="all glass files together; past it the oldest glass files are deleted"
        " (at most 1PiB)",
    )

    @model_validator(mode="after")
    def _largest_report_fits(self) -> GlassConfig:
        if self.client_byte_burst < self.max_body_bytes:
            raise ValueError(
                "client_byte_burst must be at least max_body_bytes, or the largest report"
                " accepted could never be posted"
            )
        if self.max_disk_bytes < 8 * self.max_body_bytes:
            raise ValueError(
                "max_disk_bytes must be at least 8 times max_body_bytes (a glass file holds"
                " an eighth of it, and at least one report)"
            )
        return self


def _store_problem(value: Any) -> str | None:
    if not isinstance(value, str) or value == "memory":
        return None
    problem = url_problem(value, ("redis", "rediss"))
    return (
        None if problem is None else f"a store is memory or a redis:// (rediss://) URL: {problem}"
    )


class ResumeConfig(_Section):
    """Streams that survive their reader (docs/gateway.md#resume): every streamed event gets
    an SSE ``id:``, the events are kept, and a reader who comes back gets what it missed."""

    enabled: bool = Field(True, description="ids on events, kept events, the resume routes")
    store: Annotated[str, Screen(_store_problem, shown=shown_url)] = Field(
        "memory",
        description="memory (this process), or redis://host:port/db (Redis or Valkey, shared"
        " by every worker and replica; the resume extra); a refused URL is quoted without its"
        " password",
    )
    grace: Duration = Field(
        30_000_000_000,
        ge=0,
        description="how long the upstream keeps generating with no reader before it is"
        " cancelled (0: at once, as with resume off)",
    )
    max_stream_bytes: Size = Field(
        1_048_576,
        ge=1024,
        le=MOST_BYTES,
        description="events kept per stream; past it the stream goes on but cannot be resumed"
        " (at most 1TiB)",
    )
    max_streams: int = Field(
        1_000,
        ge=1,
        le=10_000_000,
        description="streams kept per process; the longest ended go first (at most 1e7)",
    )
    ttl: Duration = Field(
        300_000_000_000,
        gt=0,
        le=86_400_000_000_000,
        description="how long an ended stream's events are kept",
    )


def _endpoint_problem(value: Any) -> str | None:
    return endpoint_problem(value) if isinstance(value, str) else None


class OtelConfig(_Section):
    """OpenTelemetry export (docs/monitoring.md#opentelemetry): each key here wins over its
    standard ``OTEL_*`` variable. Collector headers (keys) only ever come from
    ``OTEL_EXPORTER_OTLP_HEADERS``, never this file."""

    enabled: bool | None = Field(
        None,
        description="null: on when an endpoint is set here or in OTEL_EXPORTER_OTLP_ENDPOINT;"
        " false: off",
    )
    endpoint: Annotated[str, Screen(_endpoint_problem, shown=shown_url)] | None = Field(
        None, description="the collector, e.g. http://127.0.0.1:4318 (OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    protocol: Literal["grpc", "http/protobuf"] | None = Field(
        None, description="OTEL_EXPORTER_OTLP_PROTOCOL; default http/protobuf"
    )
    service_name: str | None = Field(
        None, description="OTEL_SERVICE_NAME; default steadystream-gateway"
    )
    resource_attributes: dict[str, str] = Field(
        default_factory=dict, description="added to OTEL_RESOURCE_ATTRIBUTES"
    )
    max_queue_spans: int = Field(
        2048, ge=1, le=1_000_000, description="spans waiting for export; more are dropped"
    )
    metrics_interval: Duration = Field(
        10_000_000_000, ge=100_000_000, description="how often metrics are exported"
    )


class GatewayConfig(_Section, metaclass=ConfigErrorWhenCalled):
    """The whole configuration file."""

    server: ServerConfig = ServerConfig()
    upstreams: tuple[UpstreamConfig, ...] = Field(min_length=1)
    tenants: tuple[TenantConfig, ...] = Field(
        (), description="no tenants: the gateway is open (no key needed)"
    )
    watchdog: WatchdogConfig = WatchdogConfig()
    failover: FailoverConfig = FailoverConfig()
    pacing: PacingConfig = PacingConfig()
    recording: RecordingConfig = RecordingConfig()
    limits: LimitsConfig = LimitsConfig()
    cors: CorsConfig = CorsConfig()
    glass: GlassConfig = GlassConfig()
    otel: OtelConfig = OtelConfig()
    resume: ResumeConfig = ResumeConfig()

    @model_validator(mode="after")
    def _unique_names(self) -> GatewayConfig:
        for kind, names in (
            ("upstreams", [u.name for u in self.upstreams]),
            ("tenants", [t.name for t in self.tenants]),
        ):
            seen: set[str] = set()
            for name in names:
                if name in seen:
                    raise ValueError(f"{kind}: the name {name!r} is used twice")
                seen.add(name)
        if self.limits.pacer_low_watermark >= self.limits.pacer_high_watermark:
            raise ValueError("limits: pacer_low_watermark must be below pacer_high_watermark")
        return self

    def upstreams_in_order(self) -> list[UpstreamConfig]:
        """By priority, ties in file order."""
        return sorted(self.upstreams, key=lambda u: u.priority)


def _check_pacer(spec: str | None) -> str | None:
    if spec is None:
        return None
    from steadystream.shaping import parse_spec

    try:
        parse_spec(spec)
    except SpecError as exc:
        raise ValueError(str(exc)) from None
    return spec


# -- loading ------------------------------------------------------------------------------------


def config_from_mapping(
    data: Mapping[str, Any], *, source: str = "gateway config"
) -> GatewayConfig:
    """Validate a mapping (a parsed YAML file); a :class:`ConfigError` names what is wrong."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: a gateway configuration is a mapping of keys, got {type(data).__name__}"
        )
    try:
        return GatewayConfig.model_validate(dict(data))
    except ValidationError as exc:
        # Not chained: pydantic's message quotes inputs whole (the upstreams list when one
        # failed, a section a model check refused), header values and keys with them.
        raise ConfigError(describe_errors(exc, source, GatewayConfig)) from None


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML configuration file."""
    path = Path(path)
    data = load_yaml(path, "gateway configuration")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a gateway configuration holds a mapping of keys")
    return config_from_mapping(data, source=str(path))


def with_server(config: GatewayConfig, overrides: Mapping[str, Any]) -> GatewayConfig:
    """``config`` with the ``server`` keys in ``overrides`` replaced (command-line options),
    checked as in a file: ``--workers many`` is refused naming ``--workers`` and
    ``server.workers``."""
    if not overrides:
        return config
    try:
        server = ServerConfig.model_validate({**as_written(config.server), **overrides})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = str(error["loc"][0]) if error["loc"] else "server"
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"--{key} {overrides.get(key)!r} (server.{key}): {message}")
        raise ConfigError("the command line: " + "; ".join(problems)) from exc
    return config.model_copy(update={"server": server})


def with_pacing_and_recording(
    config: GatewayConfig, *, pacer: str | None = None, record: str | Path | None = None
) -> GatewayConfig:
    """``config`` with ``--pacer SPEC`` as ``pacing.default`` and ``--record DIR`` as
    ``recording.enabled`` into that directory, over what a file says (command-line options);
    a spec that is not a pacer is a :class:`ConfigError` naming ``--pacer``."""
    update: dict[str, Any] = {}
    if pacer is not None:
        try:
            _check_pacer(pacer)
        except ValueError as exc:
            raise ConfigError(
                f"the command line: --pacer {pacer!r} (pacing.default): {exc}"
            ) from None
        update["pacing"] = config.pacing.model_copy(update={"default": pacer})
    if record is not None:
        update["recording"] = config.recording.model_copy(
            update={"enabled": True, "directory": str(record)}
        )
    return config.model_copy(update=update) if update else config


def config_from_upstreams(
    urls: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_key_env: str | None = None,
) -> GatewayConfig:
    """The quick start: these upstreams in priority order, defaults for everything else.

    ``urls`` is a list: one URL alone is refused (a text would be one upstream per letter).
    """
    if isinstance(urls, str | bytes):
        raise TypeError(f"urls must be a list of base URLs, not one text (write [{urls!r}])")
    upstreams = [
        {"name": f"upstream-{i}", "base_url": url, "priority": i, "api_key_env": api_key_env}
        for i, url in enumerate(urls, start=1)
    ]
    return config_from_mapping(
        {"server": {"host": host, "port": port}, "upstreams": upstreams}, source="--upstream"
    )
