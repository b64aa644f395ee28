"""A fault header changes the fault, never the answer: same seed, same text and schedule."""

from __future__ import annotations

from steadystream.lab import LabServer


def test_a_fault_header_does_not_change_the_text() -> None:
    import urllib.request

    import orjson

    texts = []
    for header in ({}, {"X-Lab-Fault": "slow-first-token=0ms"}):
        with LabServer("steady", seed=3) as lab:
            request = urllib.request.Request(
                f"{lab.base_url}/completions",
                data=orjson.dumps({"model": "lab", "prompt": "x", "max_tokens": 12}),
                headers={"Content-Type": "application/json", "X-Request-Id": "d-1", **header},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                texts.append(orjson.loads(response.read())["choices"][0]["text"])
    assert texts[0]
    assert texts[0] == texts[1]
