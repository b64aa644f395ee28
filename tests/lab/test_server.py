"""The lab over real loopback sockets: wire shape, errors, faults, metrics, SDK, disconnects.

Timing assertions read the ground truth (planned times, the lab's own write stamps), never
wall-clock tolerances.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from steadystream.lab import LabServer
from steadystream.protocol import timeline_from_sse
from tests.support.lab import MS, scenario

pytestmark = pytest.mark.integration

FAST = scenario(
    "steady",
    scheduler={"step_base_ms": 5.0},
    output={"min_tokens": 20, "max_tokens": 40},
    kv_cache={"total_blocks": 1024},
)
STEP_MS = 5.0 + 0.02
TIMEOUT = aiohttp.ClientTimeout(total=15)
CHAT = {"model": "lab", "messages": [{"role": "user", "content": "Tell me about pauses."}]}


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer(FAST, seed=1) as server:
        yield server


async def _post(
    url: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    data = io.BytesIO(raw) if len(raw) > 512 * 1024 else raw  # aiohttp warns on big bytes
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(url, data=data, headers=headers or {}) as response,
    ):
        headers_lower = {k.lower(): v for k, v in response.headers.items()}
        return response.status, headers_lower, await response.read()


def _events(raw: bytes) -> list[Any]:
    """The data of each SSE event: parsed JSON, or the string ``[DONE]``."""
    out: list[Any] = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            data = block[len(b"data: ") :]
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


def _truth(lab: LabServer, request_id: str) -> dict[str, Any]:
    """The served ground truth, once the request is done (polls briefly)."""
    deadline = time.monotonic() + 10
    while True:
        truth = lab.truth(request_id)
        if truth is not None and truth.done:
            return truth.to_json()
        assert time.monotonic() < deadline, f"{request_id} did not finish"
        time.sleep(0.02)


def _content(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "content"]


@pytest.mark.asyncio
async def test_chat_stream_is_shaped_like_vllm(lab: LabServer) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    status, headers, raw = await _post(
        f"{lab.base_url}/chat/completions", body, {"X-Request-Id": "shape-1"}
    )
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-request-id"] == "shape-1"
    events = _events(raw)
    role, *deltas, finish, usage, done = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(set(d["choices"][0]["delta"]) == {"content"} for d in deltas)
    assert all(d["choices"][0]["finish_reason"] is None for d in deltas)
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == len(deltas)
    assert done == "[DONE]"
    assert {e["id"] for e in events[:-1]} == {"chatcmpl-shape-1"}
    truth = _truth(lab, "shape-1")
    assert truth["tokens_written"] == len(deltas)
    assert [e["kind"] for e in truth["events"]][:2] == ["role", "content"]
    # the shared recorder reads the lab's bytes as a complete stream with exact usage
    timeline = timeline_from_sse([(0, raw)], stream_id="shape-1")
    assert timeline.total_tokens == len(deltas)
    assert timeline.outcome.value == "complete"


@pytest.mark.asyncio
async def test_completions_stream_has_no_role_chunk(lab: LabServer) -> None:
    body = {"model": "lab", "prompt": "Once", "stream": True, "max_tokens": 7}
    status, _, raw = await _post(f"{lab.base_url}/completions", body)
    assert status == 200
    *texts, finish, done = _events(raw)
    assert len(texts) == 7
    assert all(t["object"] == "text_completion" and t["choices"][0]["text"] for t in texts)
    assert finish["choices"][0] == {
        "index": 0,
        "text": "",
        "logprobs": None,
        "finish_reason": "length",
    }
    assert done == "[DONE]"


@pytest.mark.asyncio
async def test_whole_responses_match_the_ground_truth(lab: LabServer) -> None:
    status, _, raw = await _post(
        f"{lab.base_url}/chat/completions", {**CHAT, "max_tokens": 12}, {"X-Request-Id": "whole-1"}
    )
    assert status == 200
    answer = orjson.loads(raw)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 12
    truth = lab.truth("whole-1")
    assert truth is not None
    assert answer["choices"][0]["message"]["content"] == "".join(truth.texts)
    status, _, raw = await _post(
        f"{lab.base_url}/completions", {"model": "lab", "prompt": ["x"], "max_tokens": 3}
    )
    assert status == 200
    assert orjson.loads(raw)["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "param"),
    [
        ("/chat/completions", {"model": "lab"}, {}, 400, "messages"),
        ("/chat/completions", {**CHAT, "n": 2}, {}, 400, "n"),
        ("/chat/completions", {**CHAT, "max_tokens": 0}, {}, 400, "max_tokens"),
        ("/chat/completions", {**CHAT, "temperature": 9}, {}, 400, "temperature"),
        ("/chat/completions", {**CHAT, "messages": [{"role": "x"}]}, {}, 400, "messages.0.role"),
        ("/chat/completions", b"{not json", {}, 400, None),
        ("/chat/completions", {**CHAT, "model": "gpt-9"}, {}, 404, "model"),
        ("/chat/completions", CHAT, {"X-Lab-Fault": "explode=1"}, 400, "X-Lab-Fault"),
        ("/completions", {"model": "lab", "prompt": ["a", "b"]}, {}, 400, "prompt"),
        ("/completions", {"model": "lab", "prompt": "word " * 40_000}, {}, 400, "prompt"),
        ("/completions", {"model": "lab", "prompt": "x" * 2_000_000}, {}, 413, None),
    ],
)
@pytest.mark.asyncio
async def test_bad_requests_get_openai_errors_naming_the_field(
    lab: LabServer,
    path: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    param: str | None,
) -> None:
    got, _, raw = await _post(f"{lab.base_url}{path}", body, headers)
    assert got == status
    error = orjson.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["message"]


@pytest.mark.asyncio
async def test_models_health_and_unknown_truth(lab: LabServer) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.get(f"{lab.base_url}/models") as response:
            assert [m["id"] for m in (await response.json())["data"]] == ["lab"]
        async with session.get(f"{lab.url}/healthz") as response:
            assert (await response.json()) == {"status": "ok"}
        async with session.get(f"{lab.url}/lab/requests/nope") as response:
            assert response.status == 404


@pytest.mark.asyncio
async def test_error_after_fault_sends_an_error_event_then_done(lab: LabServer) -> None:
    headers = {"X-Lab-Fault": "error-after=3", "X-Request-Id": "err-1"}
    url = f"{lab.base_url}/chat/completions"
    status, _, raw = await _post(url, {**CHAT, "stream": True}, headers)
    assert status == 200
    events = _events(raw)
    contents = [e for e in events[1:] if isinstance(e, dict) and "choices" in e]
    assert len(contents) == 3
    assert events[-2]["error"]["message"] == "lab fault: error-after"
    assert events[-1] == "[DONE]"
    assert _truth(lab, "err-1")["outcome"] == "error"


@pytest.mark.asyncio
async def test_reset_after_fault_aborts_the_connection(lab: LabServer) -> None:
    headers = {"X-Lab-Fault": "reset-after=4", "X-Request-Id": "rst-1"}
    received: list[bytes] = []

    async def read_all(response: aiohttp.ClientResponse) -> None:
        async for chunk in response.content.iter_any():
            received.append(chunk)

    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(
            f"{lab.base_url}/chat/completions",
            data=orjson.dumps({**CHAT, "stream": True}),
            headers=headers,
        ) as response,
    ):
        with pytest.raises(aiohttp.ClientPayloadError):
            await read_all(response)
    events = _events(b"".join(received))
    assert len(events) == 5  # role and four tokens, then nothing: no finish, no [DONE]
    assert "[DONE]" not in events
    assert _truth(lab, "rst-1")["outcome"] == "truncated"


@pytest.mark.asyncio
async def test_stall_and_slow_first_token_faults_show_in_the_ground_truth(
    lab: LabServer,
) -> None:
    headers = {"X-Lab-Fault": "stall-after=2:300ms,slow-first-token=200ms", "X-Request-Id": "st-1"}
    status, _, _ = await _post(
        f"{lab.base_url}/chat/completions", {**CHAT, "stream": True, "max_tokens": 5}, headers
    )
    assert status == 200
    content = _content(_truth(lab, "st-1")["events"])
    assert content[0]["planned_ns"] >= 200 * MS
    assert content[0]["written_ns"] >= content[0]["planned_ns"]
    assert content[0]["causes"] == ["injected-fault"]
    assert content[2]["planned_ns"] - content[1]["planned_ns"] >= 300 * MS
    assert content[2]["causes"] == ["injected-fault"]


@pytest.mark.asyncio
async def test_echo_auth_and_oversize_faults_over_sockets(lab: LabServer) -> None:
    key = "Bearer sk-lab-socket-echo-42"
    url = f"{lab.base_url}/chat/completions"
    headers = {"X-Lab-Fault": "echo-auth=2", "X-Request-Id": "echo-1", "Authorization": key}
    status, _, raw = await _post(url, {**CHAT, "stream": True}, headers)
    assert status == 200
    events = _events(raw)
    assert events[-2]["error"]["message"] == f"lab fault: echo-auth: rejected Authorization: {key}"
    assert events[-1] == "[DONE]"
    truth = _truth(lab, "echo-1")
    assert truth["outcome"] == "error"
    assert truth["fault"] == "echo-auth=2:error"
    headers = {"X-Lab-Fault": "oversize-after=1:2MB", "X-Request-Id": "big-1"}
    status, _, raw = await _post(url, {**CHAT, "stream": True}, headers)
    assert status == 200
    blocks = raw.split(b"\n\n")
    assert max(len(block) + 2 for block in blocks) == 2_000_000
    assert _events(raw)[-1] == "[DONE]"
    assert max(event["wire_bytes"] for event in _truth(lab, "big-1")["events"]) == 2_000_000


def test_openai_sdk_streams_from_the_lab_unchanged(lab: LabServer) -> None:
    with openai.OpenAI(base_url=lab.base_url, api_key="lab", max_retries=0, timeout=15) as client:
        stream = client.chat.completions.create(
            model="lab",
            messages=[{"role": "user", "content": "hello"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Request-Id": "sdk-chat"},
        )
        pieces, usage = [], None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            usage = chunk.usage or usage
        truth = lab.truth("sdk-chat")
        assert truth is not None
        assert "".join(pieces) == "".join(truth.texts)
        assert usage is not None
        assert usage.completion_tokens == len(pieces)
        completion = client.completions.create(model="lab", prompt="Say", max_tokens=6, stream=True)
        assert sum(1 for c in completion if c.choices and c.choices[0].text) == 6
        whole = client.chat.completions.create(
            model="lab", messages=[{"role": "user", "content": "x"}]
        )
        assert whole.choices[0].message.content


@pytest.mark.asyncio
async def test_disconnect_mid_stream_frees_kv_within_one_step(lab: LabServer) -> None:
    body = {**CHAT, "stream": True, "max_tokens": 200, "ignore_eos": True}
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        response = await session.post(
            f"{lab.base_url}/chat/completions",
            data=orjson.dumps(body),
            headers={"X-Request-Id": "gone-1"},
        )
        seen = 0
        async for _ in response.content:
            seen += 1
            if seen >= 10:
                break
        response.close()  # drop the connection mid-stream
    await asyncio.sleep(0)
    truth = await asyncio.to_thread(_truth, lab, "gone-1")
    assert truth["outcome"] == "cancelled"
    assert truth["disconnect_noticed_ns"] is not None
    assert truth["kv_freed_step_ns"] - truth["disconnect_noticed_ns"] <= STEP_MS * MS
    assert truth["tokens_after_disconnect"] <= 1
    assert truth["tokens_written"] < 200
    assert lab.engine.num_running == 0


def test_metrics_agree_with_the_ground_truth() -> None:
    tight = scenario(
        "steady",
        scheduler={"step_base_ms": 5.0},
        kv_cache={"block_tokens": 16, "total_blocks": 12},
    )
    with LabServer(tight, seed=2) as lab:
        client = openai.OpenAI(base_url=lab.base_url, api_key="lab", max_retries=0, timeout=15)

        def one(i: int) -> None:
            for _ in client.chat.completions.create(
                model="lab",
                messages=[{"role": "user", "content": "go"}],
                stream=True,
                max_tokens=40,
                extra_body={"ignore_eos": True},
                extra_headers={"X-Request-Id": f"m-{i}"},
            ):
                pass

        async def all_of_them() -> None:
            await asyncio.gather(*(asyncio.to_thread(one, i) for i in range(4)))

        asyncio.run(all_of_them())
        truths = [_truth(lab, f"m-{i}") for i in range(4)]
        metrics = _scrape(f"{lab.url}/metrics")
    content = [[e["written_ns"] for e in _content(t["events"])] for t in truths]
    gaps = [b - a for times in content for a, b in itertools.pairwise(times)]
    assert metrics["vllm:time_to_first_token_seconds_count"] == 4
    assert metrics["vllm:time_to_first_token_seconds_sum"] == pytest.approx(
        sum(times[0] for times in content) / 1e9, abs=1e-6
    )
    assert metrics["vllm:inter_token_latency_seconds_count"] == len(gaps)
    assert metrics["vllm:inter_token_latency_seconds_sum"] == pytest.approx(
        sum(gaps) / 1e9, abs=1e-6
    )
    preempted = sum(len(t["preempted_ns"]) for t in truths)
    assert preempted > 0  # 4 x 54 tokens do not fit in 12 blocks of 16
    assert metrics["vllm:num_preemptions_total"] == preempted
    assert metrics["vllm:num_requests_running"] == 0
    assert metrics["vllm:kv_cache_usage_perc"] == 0
    assert metrics["vllm:iteration_tokens_total_count"] > 0
    assert "vllm:spec_decode_num_drafts_total" in metrics


def _scrape(url: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name_labels, value = line.rsplit(" ", 1)
        values[name_labels.split("{", 1)[0]] = float(value)
    return values
