"""What reading an engine's `/metrics` page costs the streams beside it: how late the loop runs.

    python benchmarks/bench_engine_scrape.py --engines 1 4 16 --repeat 5

``bench --engine-metrics`` and a recording gateway (``recording.engine_metrics``) scrape the
engine's Prometheus page every 100 ms (steadystream/engine_metrics.py). The page here is a
vLLM one's shape: twelve histograms of 30 buckets and forty gauges per engine, with the
model's name on every series (about 40 KB an engine). Two ways, side by side in one process:

- **prometheus_client, on the loop**: its parser, called where the scrape ran (as it was);
- **ours, on a thread**: the one-pattern reader ``parse_exposition`` (what runs now), handed
  to a thread with ``asyncio.to_thread``.

For each: the parse alone (best of ``--repeat``, ms), and the worst lateness of a ticker on
the event loop that asks to wake every millisecond while one page is read: the gap every
stream on that loop would have seen.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from prometheus_client.parser import text_string_to_metric_families

from steadystream.engine_metrics import parse_exposition

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def page(engines: int) -> str:
    lines = []
    for h in range(12):
        lines += [f"# HELP vllm:hist{h} A histogram.", f"# TYPE vllm:hist{h} histogram"]
        for engine in range(engines):
            labels = f'engine="{engine}",model_name="{MODEL}"'
            for b in range(30):
                lines.append(f'vllm:hist{h}_bucket{{{labels},le="{b / 10:.1f}"}} {b * 10}.0')
            lines.append(f'vllm:hist{h}_bucket{{{labels},le="+Inf"}} 400.0')
            lines.append(f"vllm:hist{h}_sum{{{labels}}} 12.5")
            lines.append(f"vllm:hist{h}_count{{{labels}}} 400.0")
    for g in range(40):
        lines += [f"# HELP vllm:gauge{g} A gauge.", f"# TYPE vllm:gauge{g} gauge"]
        for engine in range(engines):
            lines.append(f'vllm:gauge{g}{{engine="{engine}",model_name="{MODEL}"}} 3.0')
    return "\n".join(lines) + "\n"


def by_prometheus_client(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")) or not math.isfinite(sample.value):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def parse_ms(parse: Callable[[str], dict[str, float]], text: str, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        began = time.perf_counter()
        parse(text)
        best = min(best, time.perf_counter() - began)
    return best * 1e3


async def worst_late_ms(read: Callable[[], Awaitable[None]]) -> float:
    """The worst lateness of a 1 ms ticker while ``read`` (a coroutine function) runs."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    done = False

    async def tick() -> None:
        nonlocal worst
        while not done:
            asked = loop.time()
            await asyncio.sleep(0.001)
            worst = max(worst, loop.time() - asked - 0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    await read()
    await asyncio.sleep(0.01)
    done = True
    await ticker
    return worst * 1e3


async def both_late(text: str) -> tuple[float, float]:
    async def on_loop() -> None:
        by_prometheus_client(text)

    async def on_thread() -> None:
        await asyncio.to_thread(parse_exposition, text)

    return await worst_late_ms(on_loop), await worst_late_ms(on_thread)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        "engines  page KB  prometheus_client ms  ours ms  ratio  loop late: on the loop / thread ms"
    )
    for engines in args.engines:
        text = page(engines)
        assert parse_exposition(text) == by_prometheus_client(text)
        theirs = parse_ms(by_prometheus_client, text, args.repeat)
        ours = parse_ms(parse_exposition, text, args.repeat)
        late_loop, late_thread = asyncio.run(both_late(text))
        print(
            f"{engines:7d}  {len(text) / 1024:7.0f}  {theirs:20.1f}  {ours:7.1f}  "
            f"{theirs / ours:5.1f}  {late_loop:10.1f} / {late_thread:.1f}"
        )


if __name__ == "__main__":
    main()
