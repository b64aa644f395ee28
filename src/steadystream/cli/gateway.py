"""``steadystream gateway``: the OpenAI-compatible streaming proxy (docs/gateway.md)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steadystream._flags import Flag
from steadystream._signals import handling
from steadystream.cli import app
from steadystream.cli._models import model_options

if TYPE_CHECKING:
    from steadystream.gateway.config import GatewayConfig


# --host and --port are the gateway's own: given, they override the configuration's server
# section; lab's and replay's (steadystream._options.Host, Port) bind where they say.
@app.command()
@model_options
def gateway(
    *,
    config: Annotated[
        Path | None, Flag("The gateway's YAML configuration.", names=("--config", "-c"))
    ] = None,
    upstream: Annotated[
        tuple[str, ...],
        Flag(
            "An upstream base URL (repeat, in priority order); starts without a config.",
            names=("--upstream",),
            metavar="URL",
        ),
    ] = (),
    upstream_key_env: Annotated[
        str | None,
        Flag("With --upstream: the environment variable holding their API key.", metavar="NAME"),
    ] = None,
    host: Annotated[
        str | None, Flag("Address to bind (default 127.0.0.1, or the config's).", metavar="ADDRESS")
    ] = None,
    port: Annotated[int | None, Flag("Port to listen on (default 8080, or the config's).")] = None,
    workers: Annotated[
        str | None,
        Flag(
            "Processes sharing the port, each with its own event loop: a number or 'auto'"
            " (one per core); default 1, or the config's server.workers. SIGHUP replaces them"
            " with the configuration read again.",
            metavar="N|auto",
        ),
    ] = None,
    pacer: Annotated[
        str | None,
        Flag(
            "Pace every stream with this pacer, e.g. leaky or leaky:interval=33ms"
            " (docs/pacing.md); over the config's pacing.default.",
            metavar="SPEC",
        ),
    ] = None,
    record: Annotated[
        Path | None,
        Flag(
            "Record both edges of every stream to rotating JSONL files in DIR, for"
            " analyze and report; over the config's recording section.",
            metavar="DIR",
        ),
    ] = None,
) -> None:
    """Measure, pace, fail over and cancel LLM streams between clients and their providers."""
    # Until the gateway installs its own handler (a reload with workers, a note with one), a
    # SIGHUP must not end a gateway that is still starting.
    with handling(signal.SIGHUP, signal.SIG_IGN):
        from steadystream._exceptions import ConfigError
        from steadystream._validation import shown_url
        from steadystream.cli._errors import exit_on_error
        from steadystream.gateway.app import check_startable
        from steadystream.gateway.config import (
            config_from_upstreams,
            with_pacing_and_recording,
            with_server,
        )
        from steadystream.gateway.line import describe_line
        from steadystream.gateway.server import serve

        if (config is None) == (not upstream):
            raise typer.BadParameter(
                "give --config FILE or at least one --upstream URL", param_hint="--config"
            )
        with exit_on_error():
            if config is not None:
                chosen = _load(config)
            else:
                chosen = config_from_upstreams(upstream, api_key_env=upstream_key_env)
            overrides: dict[str, object] = {"host": host, "port": port, "workers": workers}
            overrides = {k: v for k, v in overrides.items() if v is not None}

            def with_options(loaded: GatewayConfig) -> GatewayConfig:
                """The configuration with the command line's options over it (on reload too)."""
                paced = with_pacing_and_recording(loaded, pacer=pacer, record=record)
                return with_server(paced, overrides)

            chosen = with_options(chosen)
            try:  # (before the banner, which would say it paces or records)
                check_startable(chosen)
            except ConfigError as exc:
                raise ConfigError(_named(str(exc), config, pacer, record)) from exc
            typer.echo(_banner(chosen, describe_line()))
            for upstream_config in chosen.upstreams_in_order():
                base = shown_url(upstream_config.base_url).rstrip("/")
                if not base.endswith("/v1"):
                    # Not an error (a provider may serve its API elsewhere), but the commonest
                    # first mistake: the server's root given where its API base goes.
                    typer.echo(
                        f"note: {upstream_config.name}'s base URL {base} does not end in /v1;"
                        f" requests go to {base}/chat/completions (did you mean {base}/v1?)"
                    )

            def reload() -> GatewayConfig:
                assert config is not None
                return with_options(_load(config))

            serve(chosen, reload=None if config is None else reload)


def _load(path: Path) -> GatewayConfig:
    """The configuration in ``path``; a path the system cannot even look up (a folder on
    the way that this user may not enter, a name too long) is a :class:`ConfigError` too,
    at start as on a reload, not a traceback."""
    from steadystream._exceptions import ConfigError
    from steadystream.gateway.config import load_config

    try:
        return load_config(path)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the gateway configuration: {exc.strerror or exc}"
        ) from exc


def _named(message: str, config: Path | None, pacer: str | None, record: Path | None) -> str:
    """A refusal at start, said with where its value came from: the option that set it, or
    the file."""
    if pacer is not None and "pacing.default" in message:
        return f"--pacer {pacer!r}: {message}"
    if record is not None and "recording.directory" in message:
        return f"--record {str(record)!r}: {message}"
    if config is not None and not message.startswith(str(config)):
        return f"{config}: {message}"
    return message


def _banner(config: GatewayConfig, line: str) -> str:
    """The start line: where it listens, what it relays to, and how (an upstream's URL
    without its user, password or query: it may carry a key)."""
    from steadystream._validation import shown_url

    names = ", ".join(f"{u.name} ({shown_url(u.base_url)})" for u in config.upstreams_in_order())
    tenants = f"{len(config.tenants)} tenants" if config.tenants else "open (no tenants)"
    pacing = f"paced by {config.pacing.default}" if config.pacing.default else "not paced"
    recording = config.recording
    recorded = f"recording to {recording.directory}" if recording.enabled else "not recording"
    return (
        f"gateway: http://{config.server.host}:{config.server.port}/v1 -> {names}; "
        f"failover {config.failover.policy}, {tenants}, {pacing}, {recorded}; relayed by {line}"
    )
