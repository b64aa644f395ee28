"""Configuration: defaults, units, and errors that name the key and the accepted values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steadystream import ConfigError
from steadystream.gateway import config_from_mapping, config_from_upstreams, create_app, load_config

UPSTREAM = {"name": "lab", "base_url": "http://127.0.0.1:8000/v1"}


def config(**sections: Any) -> dict[str, Any]:
    return {"upstreams": [UPSTREAM], **sections}


def test_defaults_are_the_documented_ones() -> None:
    cfg = config_from_mapping(config())
    assert cfg.server.host == "127.0.0.1"
    assert cfg.watchdog.stall_timeout == 1_500_000_000
    assert cfg.limits.stuck_timeout == 30_000_000_000
    assert cfg.limits.keepalive_interval == 15_000_000_000
    assert cfg.failover.policy == "continue"
    assert cfg.recording.keep_text is False
    assert cfg.tenants == ()


def test_durations_and_sizes_as_people_write_them() -> None:
    cfg = config_from_mapping(
        config(
            watchdog={"stall_timeout": "400ms", "first_token_timeout": 2},
            limits={"max_body_bytes": "64KiB", "buffer_bytes": 4096},
        )
    )
    assert cfg.watchdog.stall_timeout == 400_000_000
    assert cfg.watchdog.first_token_timeout == 2_000_000_000
    assert cfg.limits.max_body_bytes == 65536


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (config(failover={"policy": "maybe"}), ["failover.policy", "'continue'", "'off'"]),
        (config(watchdog={"stall_timout": "1s"}), ["watchdog.stall_timout", "stall_timeout"]),
        (
            {"upstreams": [{**UPSTREAM, "bogus": 1}]},
            ["upstreams.0.bogus", "base_url", "chat_continuation"],
        ),
        (config(watchdog={"stall_timeout": "soon"}), ["watchdog.stall_timeout", "1.5s"]),
        (config(limits={"buffer_bytes": "lots"}), ["limits.buffer_bytes", "64KiB"]),
        (config(tenants=[{"name": "t", "pacer": "wobbly"}]), ["tenants.0.pacer", "leaky"]),
        ({"upstreams": [{"name": "x", "base_url": "ftp://h"}]}, ["upstreams.0.base_url", "http"]),
        ({"upstreams": [UPSTREAM, UPSTREAM]}, ["used twice"]),
        ({}, ["'upstreams'", "required"]),
        # true is no 1, false no 0 (pydantic would take them): a slip, named
        (config(server={"port": True}), ["server.port", "a number, not true"]),
        (config(failover={"max_attempts": False}), ["failover.max_attempts", "not false"]),
        ({"upstreams": [{**UPSTREAM, "priority": True}]}, ["upstreams.0.priority", "not true"]),
        (config(failover={"retry_statuses": [True, 502]}), ["retry_statuses", "true or false"]),
        (
            {"upstreams": [{**UPSTREAM, "chat_continuation": "magic"}]},
            ["chat_continuation", "'vllm'", "'prefix'", "'none'"],
        ),
    ],
)
def test_errors_name_the_key_and_what_is_accepted(data: dict[str, Any], needles: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(data)
    for needle in needles:
        assert needle in str(caught.value)


def test_load_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "upstreams:\n"
        "  - {name: primary, base_url: 'http://127.0.0.1:8001/v1', priority: 1}\n"
        "  - {name: backup, base_url: 'http://127.0.0.1:8002/v1', priority: 0}\n"
        "failover: {policy: regenerate}\n",
        encoding="utf-8",
    )
    cfg = load_config(path)
    assert [u.name for u in cfg.upstreams_in_order()] == ["backup", "primary"]
    assert cfg.failover.policy == "regenerate"
    path.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_quick_start_from_upstream_urls() -> None:
    cfg = config_from_upstreams(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1/"])
    assert [(u.name, u.base_url) for u in cfg.upstreams_in_order()] == [
        ("upstream-1", "http://127.0.0.1:1/v1"),
        ("upstream-2", "http://127.0.0.1:2/v1"),
    ]
    assert cfg.server.host == "127.0.0.1"


def test_the_app_refuses_a_pacer_that_would_deadlock_the_backpressure() -> None:
    # phrase may hold a whole phrase waiting for input: above the low watermark it deadlocks.
    cfg = config_from_mapping(
        config(pacing={"default": "phrase:cap=40"}, limits={"pacer_low_watermark": 5})
    )
    with pytest.raises(ConfigError, match=r"pacing\.default"):
        create_app(cfg, env={})


def test_missing_environment_variables_are_named() -> None:
    cfg = config_from_mapping({"upstreams": [{**UPSTREAM, "api_key_env": "LAB_KEY"}]})
    with pytest.raises(ConfigError, match="LAB_KEY") as caught:
        create_app(cfg, env={})
    assert "upstreams.0.api_key_env" in str(caught.value)
    tenants = config_from_mapping(config(tenants=[{"name": "t", "api_key_env": ["T_KEY"]}]))
    with pytest.raises(ConfigError, match="T_KEY"):
        create_app(tenants, env={})


def test_command_line_server_options_keep_the_files_timeouts() -> None:
    # A duration is held in ns; validated again as a bare number it read as seconds: every
    # gateway started with --port had its header and body timeouts made a billion times
    # longer (no slow-client bound at all), or, with durations bounded, refused to start.
    from steadystream.gateway.config import config_from_mapping, with_server

    config = config_from_mapping(
        {"upstreams": [{"name": "a", "base_url": "http://127.0.0.1:9/v1"}],
         "server": {"header_timeout": "3s", "body_timeout": 45}},
    )  # fmt: skip
    server = with_server(config, {"port": 18_099}).server
    assert server.port == 18_099
    assert (server.header_timeout, server.body_timeout) == (3_000_000_000, 45_000_000_000)
