"""llama.cpp's own server (llama-server) with Gemma 3 270M: one real engine that streams in the
three dialects. The official SDKs read its Responses and Messages streams through the gateway,
the gateway records both edges of each in its dialect, and bench records each API's streams.
"""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from steadystream import EventKind, Outcome, Timeline, Where
from steadystream.bench import Bench, ClosedLoop, Endpoint, RunOptions, Workload, builtin_prompts
from steadystream.gateway import GatewayServer
from tests.support.gateway import MemorySink, gateway_config
from tests.support.real_parts import LLAMA_MODEL, Child

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ASK = [{"role": "user", "content": "Name three colours."}]


def visible_events(timeline: Timeline) -> int:
    return sum(1 for kind in timeline.kinds if EventKind(int(kind)) is EventKind.CONTENT)


def test_the_sdks_read_its_responses_and_messages_through_the_gateway(
    llama_server: Child,
) -> None:
    sink = MemorySink()
    config = gateway_config(
        {"name": "llama-server", "base_url": f"{llama_server.url}/v1"},
        watchdog={"first_token_timeout": "60s", "stall_timeout": "30s"},
    )
    with GatewayServer(config, recorder=sink) as gw:
        oai = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
        claude = anthropic.Anthropic(
            base_url=gw.base_url.removesuffix("/v1"), api_key="unused", max_retries=0
        )
        with oai, claude:
            deltas = [
                event.delta
                for event in oai.responses.create(
                    model=LLAMA_MODEL,
                    input=ASK,  # type: ignore[arg-type]
                    max_output_tokens=24,
                    stream=True,
                    extra_headers={"X-Request-Id": "real-responses"},
                )
                if event.type == "response.output_text.delta"
            ]
            with claude.messages.stream(
                model=LLAMA_MODEL,
                max_tokens=24,
                messages=ASK,  # type: ignore[arg-type]
                extra_headers={"X-Request-Id": "real-messages"},
            ) as stream:
                text = "".join(stream.text_stream)
                final = stream.get_final_message()
    assert deltas
    assert "".join(deltas).strip()
    assert text.strip()
    assert final.usage.output_tokens >= 1
    for request_id, answer in (("real-responses", "".join(deltas)), ("real-messages", text)):
        up, down = sink.edges(request_id, timeout=30)
        for timeline in (up, down):
            assert timeline.outcome is Outcome.COMPLETE
            assert visible_events(timeline) >= 1
            assert timeline.usage is not None
            assert timeline.usage["completion_tokens"] >= 1
        assert visible_events(down) == visible_events(up)
        assert len(answer) >= visible_events(down) // 4  # each event brought text


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_bench_records_its_streams_in_each_api(llama_server: Child, api: str) -> None:
    async def run() -> list[Timeline]:
        endpoint = Endpoint(f"{llama_server.url}/v1", LLAMA_MODEL, kind=api, request_id_header=None)
        workload = Workload(builtin_prompts(), max_tokens=16)
        async with Bench(endpoint, workload, lab_truth="off") as bench:
            result = await bench.run(ClosedLoop(1), RunOptions(max_requests=2))
        return result.timelines

    timelines = asyncio.run(run())
    assert [t.outcome for t in timelines] == [Outcome.COMPLETE] * 2
    for timeline in timelines:
        assert timeline.where is Where.CLIENT
        kinds = [EventKind(int(k)) for k in timeline.kinds]
        assert kinds[0] is EventKind.ROLE  # response.created / message_start: not a token
        assert 1 <= visible_events(timeline) <= 16
        assert timeline.usage is not None
        assert 1 <= timeline.usage["completion_tokens"] <= 16
        assert timeline.meta["usage_requested"] == "on"  # given unasked by both APIs
