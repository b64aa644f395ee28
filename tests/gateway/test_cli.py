"""`steadystream gateway`: its options, and bad configurations as one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream.cli import _register, app
from steadystream.gateway import server
from steadystream.gateway.line import describe_line

_register()
runner = CliRunner()


def test_it_needs_a_config_or_an_upstream() -> None:
    result = runner.invoke(app, ["gateway"])
    assert result.exit_code == 2
    assert "--upstream" in result.output


def test_a_bad_config_is_one_line_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("upstreams: [{name: a, base_url: 'http://127.0.0.1:1/v1'}]\nwatchdog: {x: 1}\n")
    result = runner.invoke(app, ["gateway", "--config", str(path)])
    assert result.exit_code == 2
    assert "watchdog.x" in result.output
    assert "stall_timeout" in result.output
    assert "Traceback" not in result.output


def test_quick_start_serves_the_upstreams_given(monkeypatch: pytest.MonkeyPatch) -> None:
    served = []
    monkeypatch.setattr(server, "serve", lambda config, **_: served.append(config))
    result = runner.invoke(
        app,
        [
            "gateway",
            "--upstream",
            "http://127.0.0.1:1/v1",
            "--upstream",
            "http://127.0.0.1:2/v1",
            "--port",
            "9999",
        ],
    )
    assert result.exit_code == 0, result.output
    (config,) = served
    assert [u.base_url for u in config.upstreams_in_order()] == [
        "http://127.0.0.1:1/v1",
        "http://127.0.0.1:2/v1",
    ]
    assert (config.server.host, config.server.port) == ("127.0.0.1", 9999)
    assert "open (no tenants)" in result.output
    assert f"relayed by {describe_line()}" in result.output
