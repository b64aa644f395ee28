"""``/metrics`` against hostile clients: every label value a client can choose is bounded, the
text stays valid whatever a label value holds, and no key a client or upstream sent is shown.

A client chooses a model name, a request id, a pacer header, a gateway key, an API path and a
body; an upstream chooses its status. Thousands of distinct ones go through a gateway on
loopback to an upstream that answers any model, cheaply (whole answers and refusals, one
connection), and ``/metrics`` is parsed back with prometheus_client's own parser.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from steadystream.gateway import GatewayServer
from steadystream.gateway.model_labels import (
    MAX_MODEL_LABEL_CHARS,
    OTHER_MODEL,
    ModelLabels,
    start_shared_models,
)
from steadystream.gateway.shared_metrics import SharedMetrics
from steadystream.gateway.upstreams import UpstreamPool
from tests.support.gateway import MESSAGES, MemorySink, gateway_config, get, post
from tests.support.threaded_app import ThreadedApp

pytestmark = pytest.mark.integration

ENV = {"UP_KEY": "sk-upstream-secret-0123456789", "WEB_KEY": "gw-tenant-secret-9876543210"}
GATEWAY_KEY = {"Authorization": f"Bearer {ENV['WEB_KEY']}"}
TENANTS = [{"name": "web", "api_key_env": ["WEB_KEY"]}]
LIMIT = 8  # limits.max_model_labels of the gateways here
REQUESTS = 5_000  # on each build of the relay: 10,000 in all


class AnyModelUpstream(ThreadedApp):
    """Answers a chat completion for any model, whole or streamed; a body's ``status`` field
    is the status it refuses with instead."""

    what = "the any-model upstream"

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if "status" in body:
            error = {"error": {"message": "refused", "type": "x"}}
            return web.Response(body=orjson.dumps(error), status=int(body["status"]))
        message = {"role": "assistant", "content": "hi"}
        if not body.get("stream"):
            answer = {"object": "chat.completion", "model": body["model"], "choices": [
                {"index": 0, "message": message, "finish_reason": "stop"}
            ]}  # fmt: skip
            return web.json_response(answer)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for delta, finish in ((message, None), ({}, "stop")):
            chunk = {"object": "chat.completion.chunk", "model": body["model"], "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish}
            ]}  # fmt: skip
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)


@pytest.fixture(scope="module")
def upstream() -> Iterator[AnyModelUpstream]:
    with AnyModelUpstream() as server:
        yield server


def serve(upstream: AnyModelUpstream, registry: CollectorRegistry) -> GatewayServer:
    entry = {"name": "any", "base_url": upstream.base_url, "api_key_env": "UP_KEY"}
    config = gateway_config(entry, tenants=TENANTS, limits={"max_model_labels": LIMIT})
    return GatewayServer(config, env=ENV, registry=registry)


def chat(model: str, **extra: Any) -> bytes:
    return orjson.dumps({"model": model, "messages": MESSAGES, **extra})


def scrape(base_url: str) -> tuple[bytes, list[dict[str, str]]]:
    """The text of ``/metrics`` and every sample's labels, parsed back (or a ValueError)."""
    status, text = get(base_url, "/metrics", GATEWAY_KEY)
    assert status == 200
    families = list(text_string_to_metric_families(text.decode()))
    return text, [sample.labels for family in families for sample in family.samples]


def test_thousands_of_distinct_client_values_leave_the_metrics_bounded(
    upstream: AnyModelUpstream,
) -> None:
    """Each request names its own model, id, pacer, key or path; only the first ``LIMIT``
    served models get labels, and no other value a client chose is a label value at all."""
    registry = CollectorRegistry()
    with serve(upstream, registry) as gw:
        url = urlsplit(gw.base_url)
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
        statuses: dict[int, int] = {}

        def send(path: str, body: bytes, headers: dict[str, str]) -> None:
            connection.request("POST", f"/v1{path}", body, {**GATEWAY_KEY, **headers})
            response = connection.getresponse()
            response.read()
            statuses[response.status] = statuses.get(response.status, 0) + 1

        try:
            for i in range(REQUESTS):
                marker = f"hostile{i:05d}"
                headers = {"X-Request-Id": f"{marker}-id", "X-Steadystream-Pacer": marker}
                kind = i % 5
                if kind == 0:  # whole answers, each for a model of its own
                    send("/chat/completions", chat(f"{marker}-model"), headers)
                elif kind == 1:  # refused by the upstream, with a status of its choosing
                    status = 500 + i // 5 % 100
                    send("/chat/completions", chat(f"{marker}-m", status=status), headers)
                elif kind == 2:  # a gateway key of its own: refused as an unknown tenant
                    send("/chat/completions", chat("m"), {"Authorization": f"Bearer {marker}"})
                elif kind == 3:  # a path of its own
                    send(f"/{marker}", chat("m"), headers)
                else:  # a body that is no request
                    send("/chat/completions", b'{"model": "' + marker.encode(), headers)
            keys = {"X-Request-Id": ENV["UP_KEY"], "X-Steadystream-Pacer": ENV["WEB_KEY"]}
            send("/chat/completions", chat("hostile00000-model"), keys)
            for i in range(4):  # and a few streams
                body = chat(f"s{i}", stream=True)
                streamed = post(gw.base_url, "/chat/completions", body, GATEWAY_KEY)
                assert streamed.status == 200
                assert streamed.done
        finally:
            connection.close()
        text, samples = scrape(gw.base_url)
    assert statuses[200] == REQUESTS // 5 + 1
    assert statuses[401] == statuses[404] == REQUESTS // 5
    labelled = {f"hostile{i:05d}-model" for i in range(0, 5 * LIMIT, 5)}  # the first served
    chosen = {value for labels in samples for value in labels.values() if "hostile" in value}
    assert chosen == labelled  # no id, pacer, key, path or refused model
    models = {labels["model"] for labels in samples if "model" in labels}
    assert models == labelled | {OTHER_MODEL}
    kinds = {labels["kind"] for labels in samples if "kind" in labels}
    assert len(kinds) <= 100 + 10  # the upstream's statuses, and the gateway's own codes
    tenants = {labels["tenant"] for labels in samples if "tenant" in labels}
    assert tenants == {"web", "unknown"}
    assert len(samples) < 20_000
    assert len(text) < 4_000_000
    assert ENV["UP_KEY"].encode() not in text
    assert ENV["WEB_KEY"].encode() not in text


def test_label_values_that_break_naive_text_are_escaped_and_read_back(
    upstream: AnyModelUpstream, tmp_path: Path
) -> None:
    """Quotes, backslashes, line breaks, NUL and the longest name allowed are label values
    like any other, on one worker's ``/metrics`` and on every worker's sum; a longer name
    (here 100 KB) is ``other``."""
    hostile = [
        'a"b',
        "a\\b",
        "a\nb",
        'a\\"\n}',
        "a\x00b",
        "ĉ✓\u2028\r\t",
        "M" * MAX_MODEL_LABEL_CHARS,
    ]
    huge = "x" * 100_000
    registry = CollectorRegistry()
    with serve(upstream, registry) as gw:
        for model in [*hostile, huge]:
            answered = post(gw.base_url, "/chat/completions", chat(model), GATEWAY_KEY)
            assert answered.status == 200
        text, samples = scrape(gw.base_url)
    assert {labels["model"] for labels in samples if "model" in labels} == {*hostile, OTHER_MODEL}
    assert huge.encode() not in text
    # The sum of every worker's snapshot, through the files they share.
    summed = SharedMetrics(registry, tmp_path).exposition()
    families = text_string_to_metric_families(summed.decode())
    again = {s.labels["model"] for f in families for s in f.samples if "model" in s.labels}
    assert again == {*hostile, OTHER_MODEL}


def test_a_model_name_holding_a_key_gets_no_label() -> None:
    """A client that sends its key (or an upstream's) as the model, to an upstream that
    answers any name, must not show it to every reader of ``/metrics``."""
    entry = {"name": "any", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "UP_KEY"}
    pool = UpstreamPool(gateway_config(entry, tenants=TENANTS), None, ENV)
    labels = ModelLabels([], 100, redact=pool.redact)
    keyed = [
        ENV["WEB_KEY"],
        f"gpt-{ENV['UP_KEY']}",
        ENV["WEB_KEY"][:10],  # a key's start is hidden all the same
    ]
    for model in [*keyed, "plain-model"]:
        labels.served(model)
    assert {labels.label(model) for model in keyed} == {OTHER_MODEL}
    assert labels.label("plain-model") == "plain-model"


def test_a_key_sent_as_the_model_never_reaches_metrics_or_records(
    upstream: AnyModelUpstream,
) -> None:
    keyed = [ENV["WEB_KEY"], f"gpt-{ENV['UP_KEY']}"]
    sink = MemorySink()
    entry = {"name": "any", "base_url": upstream.base_url, "api_key_env": "UP_KEY"}
    config = gateway_config(entry, tenants=TENANTS, limits={"max_model_labels": LIMIT})
    with GatewayServer(config, env=ENV, registry=CollectorRegistry(), recorder=sink) as gw:
        for number, model in enumerate([*keyed, "plain-model"]):
            headers = {**GATEWAY_KEY, "X-Request-Id": f"keyed-{number}"}
            answered = post(gw.base_url, "/chat/completions", chat(model), headers)
            assert answered.status == 200
        text, samples = scrape(gw.base_url)
        recorded = [sink.edges(f"keyed-{number}")[1].labels["model"] for number in range(3)]
    for shown in (text, repr(recorded).encode()):
        assert ENV["WEB_KEY"].encode() not in shown
        assert ENV["UP_KEY"].encode() not in shown
        assert ENV["WEB_KEY"][:10].encode() not in shown
    assert "plain-model" in {labels.get("model") for labels in samples}
    assert recorded[2] == "plain-model"


def test_ten_thousand_served_names_take_at_most_the_limit_on_every_worker(
    tmp_path: Path,
) -> None:
    """Three workers, each given thousands of distinct served names, label ``LIMIT`` in all
    (the configured model among them); the rest, however many, are ``other``."""
    shared = start_shared_models(tmp_path / "models.json")
    workers = [ModelLabels(["configured"], LIMIT) for _ in range(3)]
    for worker in workers:
        worker.share(shared)
    names = [f"name-{i}" for i in range(10_000)]
    for i, name in enumerate(names):
        workers[i % 3].served(name)
    given = {worker.label(name) for worker in workers for name in names}
    assert len(given) == LIMIT  # LIMIT - 1 served names, and other
    assert len(orjson.loads(shared.read_bytes())) == LIMIT - 1


def test_a_large_shared_label_set_takes_a_new_name_without_stalling(tmp_path: Path) -> None:
    """With a large ``limits.max_model_labels``, a worker's new name costs a read and a
    write of the shared file, not a scan of the file's list for every name the worker
    labelled (35 s a stream at 50,000 names, on the loop that relays every stream)."""
    shared = start_shared_models(tmp_path / "models.json")
    shared.write_bytes(orjson.dumps([f"model-{i}" for i in range(30_000)]))
    worker = ModelLabels([], 100_000)
    worker.share(shared)  # every name the others labelled is labelled here too
    for name in ("new-0", "new-1", "new-2"):  # (about 30 ms; 12 s before: not timed here)
        worker.served(name)
    assert worker.label("new-2") == "new-2"
    assert worker.label("model-29999") == "model-29999"
