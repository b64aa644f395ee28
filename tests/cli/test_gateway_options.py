"""`gateway --pacer SPEC --record DIR`: pacing and recording without a configuration file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steadystream._processes import Child, free_port, steadystream_command
from steadystream.cli import _register, app
from steadystream.files import read_jsonl
from steadystream.gateway import server
from steadystream.gateway.config import GatewayConfig
from steadystream.lab import LabServer

_register()
runner = CliRunner()


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[GatewayConfig, Any]]:
    """What the command would serve (nothing is started)."""
    calls: list[tuple[GatewayConfig, Any]] = []
    monkeypatch.setattr(server, "serve", lambda config, **kw: calls.append((config, kw["reload"])))
    return calls


def test_pacer_and_record_with_upstreams(
    served: list[tuple[GatewayConfig, Any]], tmp_path: Path
) -> None:
    record = tmp_path / "recordings"
    upstream = ["--upstream", "http://127.0.0.1:1/v1"]
    options = ["--pacer", "leaky:interval=33ms", "--record", str(record)]
    result = runner.invoke(app, ["gateway", *upstream, *options])
    assert result.exit_code == 0, result.output
    ((config, _),) = served
    assert config.pacing.default == "leaky:interval=33ms"
    assert (config.recording.enabled, config.recording.directory) == (True, str(record))
    assert f"paced by leaky:interval=33ms, recording to {record}" in result.output


def test_the_options_win_over_the_file_and_again_on_reload(
    served: list[tuple[GatewayConfig, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "upstreams: [{name: a, base_url: 'http://127.0.0.1:1/v1'}]\n"
        "pacing: {default: flush}\n"
        "recording: {enabled: false, directory: elsewhere, keep_text: true}\n"
    )
    record = tmp_path / "runs"
    args = ["gateway", "-c", str(path), "--pacer", "adaptive", "--record", str(record)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    ((config, reload),) = served
    for chosen in (config, reload()):  # SIGHUP reads the file again: the options still hold
        assert chosen.pacing.default == "adaptive"
        assert chosen.recording.enabled
        assert chosen.recording.directory == str(record)
        assert chosen.recording.keep_text  # the rest of the file's section stays


def test_without_the_options_it_says_it_neither_paces_nor_records(
    served: list[tuple[GatewayConfig, Any]],
) -> None:
    result = runner.invoke(app, ["gateway", "--upstream", "http://127.0.0.1:1/v1"])
    assert result.exit_code == 0, result.output
    assert "not paced, not recording" in result.output
    assert served[0][0].pacing.default is None


def test_a_bad_pacer_is_one_error_naming_the_option(
    served: list[tuple[GatewayConfig, Any]],
) -> None:
    result = runner.invoke(
        app, ["gateway", "--upstream", "http://127.0.0.1:1/v1", "--pacer", "leeky"]
    )
    assert result.exit_code == 2, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "--pacer 'leeky'" in error
    assert "unknown pacer 'leeky'" in error
    assert "leaky" in error  # the accepted names
    assert not served


def test_an_upstream_without_v1_gets_a_note(served: list[tuple[GatewayConfig, Any]]) -> None:
    result = runner.invoke(app, ["gateway", "--upstream", "http://127.0.0.1:1"])
    assert result.exit_code == 0, result.output
    assert "did you mean http://127.0.0.1:1/v1?" in result.output


@pytest.mark.integration
def test_a_gateway_started_so_paces_and_records_what_it_relays(tmp_path: Path) -> None:
    record, port = tmp_path / "runs", free_port()
    url = f"http://127.0.0.1:{port}"
    with LabServer("steady") as lab:
        command = steadystream_command(
            *("gateway", "--upstream", lab.base_url, "--port", str(port)),
            *("--pacer", "leaky", "--record", str(record)),
        )
        with Child("the gateway", command, health_url=f"{url}/healthz"):
            args = ["bench", f"{url}/v1", "-m", "lab", "--requests", "2", "--max-tokens", "6"]
            result = runner.invoke(app, [*args, "-o", str(tmp_path / "r.jsonl"), "--no-live"])
            assert result.exit_code == 0, result.output
    recorded = [t for path in record.glob("gateway-*.jsonl") for t in read_jsonl(path).timelines]
    assert {t.where.value for t in recorded} == {"gateway-upstream", "gateway-downstream"}
    assert len(recorded) == 6  # bench's warm-up and its two streams, both edges each
    paced = [t.meta["pacer"] for t in recorded if t.where.value == "gateway-downstream"]
    assert len(paced) == 3
    assert all(str(pacer).startswith("<Leaky") for pacer in paced)  # the paced writer ran


def test_the_banner_never_says_a_password_or_a_query_in_an_upstreams_url() -> None:
    from steadystream.cli.gateway import _banner
    from steadystream.gateway.config import config_from_mapping

    config = config_from_mapping(
        {"upstreams": [{"name": "a", "base_url": "http://user:SECRETPW1@127.0.0.1:9/v1"}]}
    )
    banner = _banner(config, "the line")
    assert "SECRETPW1" not in banner
    assert "a (http://***@127.0.0.1:9/v1)" in banner


def test_a_refusal_at_start_names_the_option_or_the_file_it_came_from(tmp_path: Path) -> None:
    from steadystream.cli.gateway import _named

    message = "key 'pacing.default': the pacer cannot run"
    assert _named(message, None, "phrase:cap=40", None).startswith("--pacer 'phrase:cap=40': ")
    assert _named("recording.directory: cannot write", None, None, tmp_path).startswith(
        f"--record {str(tmp_path)!r}: "
    )
    assert _named(message, tmp_path / "gw.yaml", None, None).startswith(f"{tmp_path}/gw.yaml: ")
