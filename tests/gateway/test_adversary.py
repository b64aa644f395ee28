"""The adversary's cases against issue 11's fixes: hostile upstreams the hardening tests missed.

The upstream is :class:`~tests.support.hostile.HostileUpstream`; its ``adv-*`` modes are the
cases here. Each test that failed before its fix says so in its docstring.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from steadystream import ConfigError, Outcome
from steadystream.gateway import GatewayServer, TimelineRecorder
from steadystream.gateway.config import config_from_mapping
from steadystream.gateway.upstreams import UpstreamPool
from tests.support.gateway import MemorySink, Streamed, chat_body, gateway_config, get, post
from tests.support.hostile import HostileUpstream

pytestmark = pytest.mark.integration

SECRET = "sk-upstream-very-secret-0042"
ENV = {"UPSTREAM_KEY": SECRET}
# What the gateway records when the watchdog's finish deadline (finish_timeout) ends a stream.
FINISH_DEADLINE = "no [DONE] nor end of the body within 300.0ms of the finish reason"


def hostile(upstream: HostileUpstream, name: str = "hostile", **extra: Any) -> dict[str, Any]:
    return {"name": name, "base_url": upstream.base_url, "api_key_env": "UPSTREAM_KEY", **extra}


@pytest.fixture(scope="module")
def upstream() -> Iterator[HostileUpstream]:
    with HostileUpstream() as server:
        yield server


def _stream(gw: GatewayServer, mode: str, request_id: str, **extra: Any) -> Streamed:
    body = chat_body(5, hostile=mode, **extra)
    return post(gw.base_url, "/chat/completions", body, {"X-Request-Id": request_id}, timeout=10)


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def test_a_json_escaped_key_is_scrubbed_like_a_plain_one() -> None:
    """Failed before: the client's JSON parser turned ``\\u0073k-...`` back into the key."""
    config = config_from_mapping(
        {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}]}
    )
    pool = UpstreamPool(config, None, {"K": SECRET})
    scrub = pool.byte_scrubber()
    assert scrub is not None
    upper = _escaped(SECRET).replace("\\u002d", "\\u002D")
    raw = f'{{"c": "key {upper}, a \\\\u0073 and \\" \\u0022 \\/ stay"}}'.encode()
    scrubbed = scrub(raw)
    assert orjson.loads(scrubbed) == {"c": 'key ***, a \\u0073 and " " / stay'}
    assert scrub(b'{"c": "a \\n b"}') == b'{"c": "a \\n b"}'  # no key: the bytes untouched
    assert pool.redact(f"echo: {_escaped(SECRET)}") == "echo: ***"
    assert pool.redact("\\\\" + SECRET) == "\\\\***"


def test_an_escaped_key_in_an_answer_never_reaches_the_client(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    """Failed before: the streamed answer carried the key, JSON-escaped, to the client."""
    with GatewayServer(gateway_config(hostile(upstream)), recorder=sink, env=ENV) as gw:
        streamed = _stream(gw, "adv-escaped-echo", "escaped")
    assert streamed.text == "you sent key ***"
    assert streamed.done


LONG_SECRET = "sk-proj-0123456789abcdefghijklmnopq"  # 33 characters, as the probe's


def test_a_key_quoted_cut_short_is_hidden_from_clients_as_from_recordings() -> None:
    """Failed before: the client-bound scrubber hid only whole keys; 27 characters of a
    33-character key followed by ``\\/`` went out as they came, while ``redact`` (logs and
    ``keep_text`` recordings) hid them. Both are one scrubber now."""
    config = config_from_mapping(
        {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}]}
    )
    pool = UpstreamPool(config, None, {"K": LONG_SECRET})
    scrub = pool.byte_scrubber()
    assert scrub is not None
    prefix = LONG_SECRET[:27]
    cases = {
        f'{{"c": "{prefix}\\/x"}}': {"c": "***/x"},
        f'{{"c": "{_escaped(prefix)}\\/x"}}': {"c": "***/x"},
        f'{{"c": "{LONG_SECRET[:8]} and {LONG_SECRET}"}}': {"c": "*** and ***"},
        f'{{"c": "{LONG_SECRET[:7]} is short"}}': {"c": f"{LONG_SECRET[:7]} is short"},
    }
    for raw, scrubbed in cases.items():
        assert orjson.loads(scrub(raw.encode())) == scrubbed, raw
        assert orjson.loads(pool.redact(raw)) == scrubbed, raw


def test_a_key_quoted_cut_short_never_reaches_the_client(
    upstream: HostileUpstream, tmp_path: Path
) -> None:
    """Failed before: the answer reached the client with 27 of the key's 33 characters."""
    config = gateway_config(
        hostile(upstream),
        recording={"enabled": True, "directory": str(tmp_path), "keep_text": True},
    )
    with GatewayServer(config, env={"UPSTREAM_KEY": LONG_SECRET}) as gw:
        streamed = _stream(gw, "adv-key-prefix", "prefix")
    assert streamed.done
    assert streamed.text == "you sent key ***/ and more"
    assert LONG_SECRET[:8].encode() not in streamed.body
    recorded = b"".join(path.read_bytes() for path in tmp_path.rglob("*.jsonl"))
    assert b"you sent key ***/ and more" in recorded
    assert LONG_SECRET[:8].encode() not in recorded


def test_the_key_never_leaks_from_ids_models_finish_reasons_usage_or_split_reads(
    upstream: HostileUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    recorder = TimelineRecorder(tmp_path, keep_text=True)
    config = gateway_config(hostile(upstream), recording={"keep_text": True})
    answers: dict[str, Streamed] = {}
    with GatewayServer(config, recorder=recorder, env=ENV) as gw:
        modes = ("adv-fields-echo", "adv-split-reads", "adv-finish-garbage", "adv-bad-chunk-cut")
        for mode in modes:
            answers[mode] = _stream(gw, mode, mode)
        whole = chat_body(5, hostile="status-text", stream=False)
        answers["text-500"] = post(gw.base_url, "/chat/completions", whole)
        answers["text-500-stream"] = _stream(gw, "status-text", "text-500-stream")
        _, metrics = get(gw.url, "/metrics")
    recorder.close()
    recordings = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    assert answers["adv-split-reads"].text == "you sent key ***"
    assert "pp***..." in (answers["adv-bad-chunk-cut"].error or "")  # the cut key, hidden
    assert answers["text-500"].status == 500
    assert "***" in answers["text-500"].json()["error"]["message"]
    assert b"you sent key ***" in recordings
    places = {
        **{f"client {mode}": a.body + orjson.dumps(a.headers) for mode, a in answers.items()},
        "metrics": metrics,
        "logs": caplog.text.encode(),
        "recordings": recordings,
    }
    for where, data in places.items():
        assert SECRET[:10].encode() not in data, where  # not even the start of it


def test_a_model_list_that_quotes_the_key_is_scrubbed(upstream: HostileUpstream) -> None:
    """Failed before: ``GET /v1/models`` passed an upstream's model ids on as they came."""
    with GatewayServer(gateway_config(hostile(upstream)), env=ENV) as gw:
        status, body = get(gw.url, "/v1/models")
    assert status == 200
    ids = [item["id"] for item in orjson.loads(body)["data"]]
    assert ids == ["lab", "model-of-***"]


@pytest.mark.parametrize("data", ["null", "5", '{"id":"x"}', '"lab"'])
def test_a_model_list_whose_data_is_no_list_lists_the_configured_models(
    upstream: HostileUpstream, data: str
) -> None:
    """Failed before: ``"data": null`` was a 500 with a traceback (``'NoneType' object is
    not iterable``)."""
    config = gateway_config(hostile(upstream), hostile(upstream, "named", models=["m1"]))
    with GatewayServer(config, env={"UPSTREAM_KEY": f"models-data-{data}"}) as gw:
        status, body = get(gw.url, "/v1/models")
    assert status == 200
    assert [item["id"] for item in orjson.loads(body)["data"]] == ["m1"]


def test_a_key_quoted_cut_short_is_hidden_from_its_eighth_character() -> None:
    """Failed before: a bad chunk's preview, or aiohttp's excerpt of a bad header line, cut
    the key and quoted its start (``sk-upstream-very...``) to the client, logs, recordings."""
    config = config_from_mapping(
        {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}]}
    )
    pool = UpstreamPool(config, None, {"K": SECRET})
    assert pool.redact(f"b'{SECRET[:16]}...'") == "b'***...'"
    assert pool.redact(f"{SECRET[:8]} {SECRET[:7]}") == f"*** {SECRET[:7]}"
    assert pool.redact(f"{SECRET}{SECRET[:12]}") == "******"


# What ended each: the finish deadline (pings do not hold it open; without it, the upstream
# pings for 30 s), or the bad bytes or the reset themselves.
ENDED_BY = {
    "adv-finish-keepalive": FINISH_DEADLINE,
    "adv-finish-garbage": "the upstream's stream went wrong after its finish reason",
    "adv-finish-reset": "the upstream's stream went wrong after its finish reason",
}


@pytest.mark.parametrize("mode", list(ENDED_BY))
def test_whatever_follows_a_finish_reason_ends_a_whole_answer_with_done(
    upstream: HostileUpstream, sink: MemorySink, mode: str
) -> None:
    """Failed before for garbage and a reset after the finish: the whole answer ended with
    an in-band error (or, with a fallback, would have been continued past its end)."""
    # The finish deadline is short where it is what ends the stream; where the bad bytes or
    # the reset end it (written within 50 ms of the finish), it is long, so that a busy
    # machine's pause before they are read does not let the deadline end it first.
    finish_timeout = "300ms" if ENDED_BY[mode] == FINISH_DEADLINE else "5s"
    config = gateway_config(
        hostile(upstream),
        hostile(upstream, "fallback", priority=1),
        watchdog={"finish_timeout": finish_timeout},
    )
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = _stream(gw, mode, mode)
        _, down = sink.edges(mode)
    assert streamed.error is None
    assert streamed.done
    assert streamed.text == "one "
    assert down.meta["ended_by_gateway"].startswith(ENDED_BY[mode])
    assert down.outcome is Outcome.COMPLETE
    assert down.meta["failovers"] == []
    assert down.meta["attempts"][0]["failure"] == "silent-after-finish"
    assert SECRET not in down.meta["ended_by_gateway"]


def test_a_choice_that_finishes_twice_does_not_end_the_other_choices(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    """Failed before: with n=2, choice 0's repeated finish reason counted as choice 1's, and
    the gateway cut choice 1 short after ``finish_timeout``, recording the stream complete."""
    config = gateway_config(hostile(upstream), watchdog={"finish_timeout": "300ms"})
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = _stream(gw, "adv-n2-double-finish", "double", n=2)
        _, down = sink.edges("double")
    assert streamed.text == "a " + "".join(f"w{i} " for i in range(8))
    assert streamed.done
    assert down.outcome is Outcome.COMPLETE
    assert "ended_by_gateway" not in down.meta


def test_choices_that_finish_in_one_chunk_start_the_finish_deadline(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    """Failed before: with n=2 and both finish reasons in one chunk, then silence, the finish
    deadline never started; the stream hung until the give-up time (30 s) and then ended in
    an error although the answer was whole."""
    config = gateway_config(hostile(upstream), watchdog={"finish_timeout": "300ms"})
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = _stream(gw, "adv-two-finishes-one-chunk", "together", n=2)
        _, down = sink.edges("together")
    # ended by the finish deadline (not the give-up time, nor the upstream's 60 s silence)
    assert down.meta["ended_by_gateway"] == FINISH_DEADLINE
    assert streamed.error is None
    assert streamed.done
    assert down.outcome is Outcome.COMPLETE
    assert down.meta["attempts"][0]["failure"] == "silent-after-finish"


@pytest.mark.parametrize("mode", ["adv-cr-only", "adv-many-small"])
def test_odd_but_valid_streams_are_relayed_whole(
    upstream: HostileUpstream, sink: MemorySink, mode: str
) -> None:
    with GatewayServer(gateway_config(hostile(upstream)), recorder=sink, env=ENV) as gw:
        streamed = _stream(gw, mode, mode)
        _, down = sink.edges(mode)
    assert streamed.text == ("one two " if mode == "adv-cr-only" else "x" * 10_000)
    assert streamed.done
    assert down.outcome is Outcome.COMPLETE


def test_a_stream_of_more_events_than_the_bound_ends_in_band_without_failover(
    upstream: HostileUpstream, sink: MemorySink
) -> None:
    # An upstream that never stops grew the gateway's memory by what it keeps of each event.
    config = gateway_config(
        hostile(upstream),
        hostile(upstream, "fallback"),
        limits={"max_stream_events": 1_000},
    )
    with GatewayServer(config, recorder=sink, env=ENV) as gw:
        streamed = _stream(gw, "adv-many-small", "too-long")
        up, down = sink.edges("too-long")
    assert "limits.max_stream_events (1000)" in (streamed.error or "")
    assert b"stream_too_long" in streamed.body
    assert 1_000 <= len(streamed.text) < 10_000  # (the read that passed the bound is relayed)
    assert set(streamed.text) == {"x"}
    assert [a["failure"] for a in down.meta["attempts"]] == ["stream-too-long"]  # no fallback
    assert len(up.times) < 10_000


@pytest.mark.parametrize(
    ("value", "passed"),
    [
        ("7", "7"),
        ("Wed, 21 Oct 2015 07:28:00 GMT", "Wed, 21 Oct 2015 07:28:00 GMT"),
        ("99999999999999999999", None),
        ("-5", None),
        ("7, 8", None),
        ("1e9", None),
        ("x" * 199, None),
    ],
)
def test_only_a_well_formed_retry_after_is_passed_on(
    upstream: HostileUpstream, value: str, passed: str | None
) -> None:
    config = gateway_config(hostile(upstream), failover={"retry_statuses": [500]})
    body = chat_body(5, hostile="retry-after", retry_after=value, stream=False)
    with GatewayServer(config, env=ENV) as gw:
        refused = post(gw.base_url, "/chat/completions", body)
    assert refused.status == 429
    assert refused.headers.get("retry-after") == passed


@pytest.mark.parametrize(
    "entry",
    [
        {"headers": {"Content-Length": "5"}},  # the rest of the body: a second request
        {"headers": {"Transfer-Encoding": "chunked"}},
        {"headers": {"Authorization": "Bearer sk-in-the-file"}},  # keys: api_key_env only
        {"forward_headers": ["Authorization"]},  # a gateway key sent on, echoed, logged
        {"forward_headers": ["host"]},
    ],
)
def test_headers_the_gateway_owns_cannot_be_configured(entry: dict[str, Any]) -> None:
    """Failed before: accepted; ``Content-Length: 5`` cut every upstream request body short
    (the upstream answered 500), and a forwarded ``Authorization`` sent the client's key
    upstream, where an echo of it reached the logs unscrubbed."""
    name = next(iter(entry))
    with pytest.raises(ConfigError, match=rf"upstreams\.0\.{name}': .* is set by the gateway"):
        config_from_mapping(
            {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1", **entry}]}
        )


def test_a_trailing_slash_is_an_unknown_path_not_a_redirect(upstream: HostileUpstream) -> None:
    """Failed before: ``/v1/chat/completions/`` and ``/v1/models/`` got Starlette's 307 (an
    empty body, a Location built from the client's Host header), not the documented JSON 404."""
    # (a Host the gateway answers to, as it answers no other on loopback: gateway/hosts.py)
    config = gateway_config(hostile(upstream), server={"allowed_hosts": ["evil.example"]})
    with GatewayServer(config, env=ENV) as gw:
        posted = post(gw.base_url, "/chat/completions/", chat_body(5), {"Host": "evil.example"})
        status, listed = get(gw.url, "/v1/models/")
    for code, body in ((posted.status, posted.body), (status, listed)):
        assert code == 404
        assert orjson.loads(body)["error"]["code"] == "not_found"
    assert "location" not in posted.headers


def test_a_gateway_key_the_model_quotes_back_is_neither_sent_nor_recorded(
    upstream: HostileUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Failed before: a tenant's key pasted into a prompt and quoted in the answer was relayed
    and recorded (``keep_text``) as it came: only upstream keys were scrubbed."""
    caplog.set_level(logging.DEBUG)
    tenant_key = "gw-tenant-key-secret-777"
    recorder = TimelineRecorder(tmp_path, keep_text=True)
    config = gateway_config(
        hostile(upstream),
        tenants=[{"name": "web", "api_key_env": ["TENANT_KEY"]}],
        recording={"keep_text": True},
    )
    body = chat_body(5, hostile="adv-echo-prompt")
    body["messages"] = [{"role": "user", "content": f"my key is {tenant_key}"}]
    with GatewayServer(config, recorder=recorder, env={**ENV, "TENANT_KEY": tenant_key}) as gw:
        streamed = post(
            gw.base_url, "/chat/completions", body, {"Authorization": f"Bearer {tenant_key}"}
        )
    recorder.close()
    recordings = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    assert streamed.text == "you said: my key is ***"
    assert b"you said: my key is ***" in recordings
    assert tenant_key.encode() not in recordings + caplog.text.encode()
