"""The glass probe on the gateway: ``/steadystream/glass.js``, its tokens, and its reports.

A page's report (:mod:`steadystream.glass.intake`) becomes a ``client`` and a ``glass``
timeline with the stream id of an answer the gateway relayed. With ``glass.accept`` on (and
recording on), every answer carries a token (``X-Steadystream-Glass-Token``,
:mod:`steadystream.glass.tokens`) for its stream and its caller's tenant, and a report is
taken only:

- from a caller the gateway's keys admit (401), with recording on (403);
- with that token, for that stream, from that tenant, before it expires (403), once (409);
- within its client's budget of reports and bytes a second (429 with ``Retry-After``); a
  client is its tenant when the gateway has tenants, else its address (an IPv6 one's /64);
- within ``glass`` limits on size and shape (413, 400).

What is taken goes to glass files of its own, beside the recording and never counted in its
rotation (:mod:`steadystream.glass.recording`), labelled with the token's tenant; a recorder
passed in by a program (not the gateway's own files) gets it through its ``write``.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections.abc import Callable, Mapping, Sequence

from starlette.requests import Request
from starlette.routing import Route

from steadystream._api_errors import ApiError
from steadystream._clock import NS_PER_S, Clock
from steadystream._exceptions import ConfigError
from steadystream.gateway.auth import gateway_key
from steadystream.gateway.config import CorsConfig, GatewayConfig
from steadystream.gateway.recording import TimelineRecorder
from steadystream.gateway.state import GatewayState
from steadystream.glass.budget import ClientBudgets, OverBudget
from steadystream.glass.intake import GlassLimits, GlassReport
from steadystream.glass.once import MarkerClaims, MemoryClaims, TokenClaims
from steadystream.glass.recording import GlassRecorder
from steadystream.glass.routes import Take, glass_routes
from steadystream.glass.tokens import GLASS_TOKEN_HEADER, MIN_SECRET_BYTES, GlassTokens
from steadystream.timeline import Timeline

__all__ = [
    "client_address",
    "gateway_glass_routes",
    "glass_cors",
    "glass_secret",
    "glass_tokens",
]

CLAIMS_FOLDER = "glass-tokens-used"


def glass_secret() -> bytes:
    """A fresh token secret: the workers' parent makes one, so that all its workers share it."""
    return secrets.token_bytes(MIN_SECRET_BYTES)


def glass_tokens(
    config: GatewayConfig, env: Mapping[str, str], clock: Clock, secret: bytes | None = None
) -> GlassTokens | None:
    """The token minter and checker, when ``glass.accept`` is on. Its secret: the variable
    ``glass.secret_env`` names (a :class:`ConfigError` when it is unset or short), else
    ``secret`` (the workers' parent's), else a new one for this process."""
    glass = config.glass
    if not glass.accept:
        return None
    if glass.secret_env is not None:
        value = env.get(glass.secret_env, "")
        if len(value.encode()) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"key 'glass.secret_env': the environment variable {glass.secret_env!r} must"
                f" hold the glass token secret, {MIN_SECRET_BYTES} bytes or more"
                f" ({'unset' if not value else 'too short'})"
            )
        secret = value.encode()
    return GlassTokens(secret or glass_secret(), glass.token_ttl // NS_PER_S, _unix_s(clock))


def client_address(host: str) -> str:
    """The address a client's budget is kept by: an IPv6 address's /64, which a single host
    is given whole (one budget per address would hand it 2**64 of them), an IPv4-mapped
    IPv6 address as its IPv4 one, any other host as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _unix_s(clock: Clock) -> Callable[[], float]:
    """Unix time as the injected clock moves (so tokens expire in simulated time too)."""
    wall, start = time.time(), clock.now_ns()
    return lambda: wall + (clock.now_ns() - start) / NS_PER_S


def glass_cors(config: GatewayConfig) -> CorsConfig:
    """The ``cors`` section, with the token header a page must read and send back added
    when glass is on (a page on another origin could do neither otherwise)."""
    cors = config.cors
    if not config.glass.accept or not cors.allow_origins:
        return cors
    header = GLASS_TOKEN_HEADER.lower()
    return cors.model_copy(
        update={
            "allow_headers": _with(cors.allow_headers, header),
            "expose_headers": _with(cors.expose_headers, header),
        }
    )


def _with(names: tuple[str, ...], name: str) -> tuple[str, ...]:
    return names if name in (n.lower() for n in names) else (*names, name)


def gateway_glass_routes(state: GatewayState) -> list[Route]:
    """The probe, and the intake when ``glass.accept`` is on."""
    config = state.config.glass
    limits = GlassLimits(max_body_bytes=config.max_body_bytes, max_events=config.max_events)
    budgets = ClientBudgets(
        posts_per_s=config.client_reports_per_s,
        post_burst=config.client_report_burst,
        bytes_per_s=config.client_bytes_per_s,
        byte_burst=config.client_byte_burst,
        max_clients=config.max_clients,
        now_ns=state.clock.now_ns,
    )
    where = _Destination(state)

    def admit(request: Request) -> Take:
        tenant = state.auth.tenant_for(gateway_key(request.headers, request.url.path)).name
        if state.recorder is None:
            raise ApiError(
                403,
                "glass reports go to the recording, which is off (recording.enabled)",
                type="permission_error",
                code="recording_off",
            )
        tokens = state.glass_tokens
        assert tokens is not None  # (made whenever glass.accept is on)
        ticket = tokens.check(request.headers.get(GLASS_TOKEN_HEADER), tenant)
        host = request.client.host if request.client is not None else "unknown"
        client = f"tenant:{tenant}" if not state.auth.open else f"address:{client_address(host)}"
        wait = budgets.take_post(client)
        if wait:
            raise OverBudget(f"{config.client_reports_per_s:g} reports a second", wait)

        def take(report: GlassReport, size: int) -> Sequence[Timeline]:
            if report.stream_id != ticket.stream_id:
                raise ApiError(
                    403,
                    f"stream_id: {GLASS_TOKEN_HEADER} is for stream {ticket.stream_id!r},"
                    f" not {report.stream_id!r}",
                    param="stream_id",
                    type="permission_error",
                    code="glass_token_other_stream",
                )
            wait = budgets.take_bytes(client, size)
            if wait:
                raise OverBudget(f"{config.client_bytes_per_s} bytes a second", wait)
            where.claims().claim(ticket, tokens.now_s())
            return report.timelines(
                keep_text=state.config.recording.keep_text,
                redact=state.pool.redact,
                hide_keys=state.pool.hide_keys,
                labels={"tenant": ticket.tenant},
            )

        return take

    def accept(timelines: Sequence[Timeline]) -> None:
        try:
            where.write(timelines)
        except OSError as exc:  # a full disk must not fail the page
            state.log.error("recording glass timelines failed: %s", exc)

    return glass_routes(
        accept if config.accept else None,
        limits,
        admit=admit,
        body_timeout_s=state.config.server.body_timeout / NS_PER_S,
    )


class _Destination:
    """Where glass goes: the gateway's own recording directory (glass files, and markers of
    used tokens that every worker sees), else the recorder a program passed in (and used
    tokens in memory). Settled at the first report: the recorder is opened at startup."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self._recorder: GlassRecorder | None = None
        self._claims: TokenClaims | None = None

    def claims(self) -> TokenClaims:
        if self._claims is None:
            recorder = self.state.recorder
            if isinstance(recorder, TimelineRecorder):
                self._claims = MarkerClaims(recorder.directory / CLAIMS_FOLDER)
            else:
                self._claims = MemoryClaims()
        return self._claims

    def write(self, timelines: Sequence[Timeline]) -> None:
        recorder = self.state.recorder
        if not isinstance(recorder, TimelineRecorder):
            if recorder is not None:
                recorder.write(timelines)
            return
        if self._recorder is None or self._recorder.directory != recorder.directory:
            self._recorder = GlassRecorder(
                recorder.directory,
                max_disk_bytes=self.state.config.glass.max_disk_bytes,
                keep_text=recorder.keep_text,
            )
        self._recorder.write(timelines)
