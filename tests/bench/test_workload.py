"""Workloads: token-count specs, the shipped prompt set, prompt files, synthetic prompts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from steadystream import InputError, SpecError
from steadystream.bench.workload import (
    TokenCount,
    Workload,
    builtin_prompts,
    read_prompts,
)
from steadystream.timeline import estimate_tokens


def draws(spec: str, n: int = 4000) -> np.ndarray:
    count = TokenCount.parse(spec)
    rng = np.random.default_rng(0)
    return np.array([count.draw(rng) for _ in range(n)])


def test_fixed_uniform_and_normal_counts() -> None:
    assert set(draws("256", 10)) == {256}
    uniform = draws("uniform:100-400")
    assert uniform.min() >= 100
    assert uniform.max() <= 400
    assert {100, 400} <= set(uniform)  # both ends included
    normal = draws("normal:300,50")
    assert normal.mean() == pytest.approx(300, rel=0.02)
    assert normal.std() == pytest.approx(50, rel=0.06)
    assert normal.min() >= 1


def test_normal_never_draws_below_one() -> None:
    assert draws("normal:2,50").min() == 1


@pytest.mark.parametrize("spec", ["0", "uniform:5-2", "lognormal:3,1", "many", "normal:0.5,1"])
def test_bad_counts_say_what_is_accepted(spec: str) -> None:
    with pytest.raises(SpecError, match="--output-tokens"):
        TokenCount.parse(spec, name="--output-tokens")


def test_count_round_trips_as_text() -> None:
    for spec in ("256", "uniform:100-400", "normal:300,50"):
        assert str(TokenCount.parse(spec)) == spec


def test_builtin_prompt_set_is_varied_and_valid() -> None:
    prompts = builtin_prompts()
    assert 30 <= len(prompts) <= 60
    assert len({p.text for p in prompts}) == len(prompts)
    sizes = [estimate_tokens(p.text) for p in prompts]
    assert min(sizes) < 20
    assert max(sizes) > 100
    assert any(len(p.messages) > 1 for p in prompts)  # system prompts and conversations


def test_requests_are_reproducible_per_index() -> None:
    workload = Workload(builtin_prompts(), output_tokens=TokenCount.parse("uniform:10-90"))
    a = [workload.request(i) for i in range(20)]
    assert a == [workload.request(i) for i in range(20)]
    assert len({r.prompt_text for r in a}) > 5  # a mix, not one prompt
    other = Workload(builtin_prompts(), output_tokens=TokenCount.parse("uniform:10-90"), seed=1)
    assert [r.max_tokens for r in a] != [other.request(i).max_tokens for i in range(20)]


def test_max_tokens_caps_the_drawn_and_the_prompts_own() -> None:
    drawn = Workload(builtin_prompts(), output_tokens=TokenCount.parse("500"), max_tokens=64)
    assert drawn.request(0).max_tokens == 64
    own = Workload(builtin_prompts(), max_tokens=64)
    assert all((own.request(i).max_tokens or 0) <= 64 for i in range(30))
    plain = Workload(builtin_prompts())
    assert {plain.request(i).max_tokens for i in range(30)} - {None}  # the prompts' own


@pytest.mark.parametrize("size", [8, 64, 512, 2000])
def test_synthetic_prompts_have_the_asked_size(size: int) -> None:
    workload = Workload(input_tokens=TokenCount.parse(str(size)))
    for index in range(5):
        text = workload.request(index).prompt_text
        assert text.startswith(f"Request {index}.")  # no shared prefix to cache
        assert size <= estimate_tokens(text) <= size + 2


def test_prompt_file_accepts_prompt_and_messages(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "hello"}\n\n'
        '{"messages": [{"role": "system", "content": "be brief"},'
        ' {"role": "user", "content": "hi"}], "max_tokens": 7}\n'
    )
    prompts = read_prompts(path)
    assert [p.text for p in prompts] == ["hello", "be brief\n\nhi"]
    assert prompts[1].max_tokens == 7


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "p.jsonl:2: not valid JSON"),
        ("[1]", "p.jsonl:2: a line must hold a JSON object"),
        ('{"messages": []}', "p.jsonl:2: 'messages' must be a non-empty list"),
        ('{"messages": [{"role": "user"}]}', "p.jsonl:2: each message needs"),
        ('{"prompt": "x", "max_tokens": 0}', "p.jsonl:2: 'max_tokens'"),
        ('{"text": "x"}', "p.jsonl:2: needs 'messages'"),
    ],
)
def test_bad_prompt_files_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(InputError, match=message):
        read_prompts(path)


def test_a_workload_needs_prompts_or_sizes() -> None:
    with pytest.raises(SpecError):
        Workload()
