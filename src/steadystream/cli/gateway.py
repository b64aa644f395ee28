"""``steadystream gateway``: the OpenAI-compatible streaming proxy (docs/gateway.md)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from steadystream._signals import handling
from steadystream.cli import app


@app.command()
def gateway(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="The gateway's YAML configuration.")
    ] = None,
    upstream: Annotated[
        list[str] | None,
        typer.Option(
            "--upstream",
            help="An upstream base URL (repeat, in priority order); starts without a config.",
        ),
    ] = None,
    upstream_key_env: Annotated[
        str | None,
        typer.Option(help="With --upstream: the environment variable holding their API key."),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default 127.0.0.1, or the config's).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default 8080, or the config's).")
    ] = None,
    workers: Annotated[
        str | None,
        typer.Option(
            help="Processes sharing the port, each with its own event loop: a number or 'auto'"
            " (one per core); default 1, or the config's server.workers. SIGHUP replaces them"
            " with the configuration read again.",
        ),
    ] = None,
) -> None:
    """Measure, pace, fail over and cancel LLM streams between clients and their providers."""
    # Until the gateway installs its own handler (a reload with workers, a note with one), a
    # SIGHUP must not end a gateway that is still starting.
    with handling(signal.SIGHUP, signal.SIG_IGN):
        from steadystream.cli._options import exit_on_error
        from steadystream.gateway.config import (
            GatewayConfig,
            config_from_upstreams,
            load_config,
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
                chosen = load_config(config)
            else:
                chosen = config_from_upstreams(upstream or [], api_key_env=upstream_key_env)
            overrides: dict[str, object] = {"host": host, "port": port, "workers": workers}
            overrides = {k: v for k, v in overrides.items() if v is not None}
            chosen = with_server(chosen, overrides)
            names = ", ".join(f"{u.name} ({u.base_url})" for u in chosen.upstreams_in_order())
            typer.echo(
                f"gateway: http://{chosen.server.host}:{chosen.server.port}/v1 -> {names}; "
                f"failover {chosen.failover.policy}, "
                f"{'open (no tenants)' if not chosen.tenants else f'{len(chosen.tenants)} tenants'}"
                f"; relayed by {describe_line()}"
            )

            def reload() -> GatewayConfig:
                assert config is not None
                return with_server(load_config(config), overrides)

            serve(chosen, reload=None if config is None else reload)
