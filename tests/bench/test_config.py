"""Bench's options, declared once: the checks a Python caller gets, the plan, the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from steadystream import InputError, SpecError
from steadystream.bench import BenchConfig, ClosedLoop, OpenLoop, plan_bench
from steadystream.bench.config import Flag, option_name
from steadystream.bench.plan import DEFAULT_REQUESTS
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from tests.support.bench import steady_run

_register()

URL = "http://127.0.0.1:9/v1"


def config(**values: Any) -> BenchConfig:
    return BenchConfig.from_options({"url": URL, "model": "lab", **values})


def test_defaults_are_the_documented_ones() -> None:
    made = BenchConfig(url=URL, model="lab")
    assert (made.grace, made.timeout, made.cooldown) == (30 * 10**9, 120 * 10**9, 2 * 10**9)
    assert (made.stall_threshold, made.ttft_target) == (400 * 10**6, 800 * 10**6)
    assert made.slo == ("goodput>=99%", "ttft_p95<=800ms")
    assert made.headers == ()
    assert made.labels == {}


def test_text_is_read_as_on_the_command_line() -> None:
    made = config(
        grace="1.5s",
        stall_threshold="250ms",
        labels=["route = chat", "tenant=a"],
        slo="goodput>=90%",
    )
    assert made.grace == 1_500_000_000
    assert made.stall_threshold == 250_000_000
    assert made.labels == {"route": "chat", "tenant": "a"}
    assert made.slo == ("goodput>=90%",)  # one text is one objective, not its letters
    assert config(labels={"route": "x"}).labels == {"route": "x"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"cancel": 0.5}, "--cancel FRACTION and --cancel-after 20tok|500ms go together"),
        ({"cancel_after": "20tok"}, "go together"),
        ({"cancel": 0.5, "cancel_after": "soon"}, "--cancel-after: 'soon' is not a point"),
        ({"cancel": 1.5, "cancel_after": "20tok"}, "--cancel: "),
        ({"rate": 1, "trace": "t.txt"}, "--trace and --rate cannot be combined"),
        ({"ramp": "5s", "trace": "t.txt"}, "--ramp does not apply to a trace"),
        ({"prompts": "p.jsonl", "input_tokens": "20"}, "--prompts and --input-tokens"),
        ({"output_tokens": "lots"}, "--output-tokens: cannot read 'lots'"),
        ({"input_tokens": "uniform:9-3"}, "--input-tokens: uniform:LOW-HIGH"),
        ({"sweep": "rates=1,2", "rate": 3}, "leave out --rate"),
        ({"sweep": "concurrency=1,2", "concurrency": 3}, "leave out --concurrency"),
        ({"sweep": "rates=1,2", "trace": "t.txt"}, "--sweep and --trace cannot be combined"),
        ({"sweep": "rates=1,2", "gate": "base.jsonl"}, "does not apply to a sweep"),
        ({"sweep": "lots"}, "--sweep"),
        ({"slo": []}, "--slo: a sweep needs at least one objective"),
        ({"slo": ["speed>=1"]}, "--slo: unknown metric 'speed'"),
        ({"max_regression": ["nonsense=1%"]}, "--max-regression: unknown metric 'nonsense'"),
        ({"headers": ["no colon"]}, "--header: expected 'Name: value'"),
        ({"labels": ["novalue"]}, "--label: expected key=value, got 'novalue'"),
        ({"output": "run.parquet"}, "--output: bench writes JSONL as it goes; use .jsonl"),
        ({"concurrency": 0}, "--concurrency: Input should be greater than or equal to 1"),
        ({"rate": -1}, "--rate: "),
        ({"rate": float("inf")}, "--rate: "),
        ({"requests": 0}, "--requests: "),
        ({"warmup": -1}, "--warmup: "),
        ({"grace": "soon"}, "--grace: cannot read 'soon' as a duration"),
        ({"timeout": "0s"}, "--timeout: Input should be greater than 0"),
        (
            {"endpoint": "embeddings"},
            "--endpoint: got 'embeddings' (accepted: 'chat', 'completions', 'responses' or"
            " 'messages')",
        ),
        ({"usage": "some"}, "--usage: got 'some'"),
        ({"lab_truth": "maybe"}, "--lab-truth: got 'maybe'"),
        ({"concurency": 3}, "--concurency: unknown key (accepted: url, model, output"),
        ({"url": "localhost:8000/v1"}, "URL must be an http(s) API base"),
        ({"model": ""}, "--model is required"),
        ({"headers": ["X-Request-Id: 1"]}, "--header: X-Request-Id is set by bench"),
        ({"request_id_header": "Bad Name"}, "--request-id-header: not a header name"),
    ],
)
def test_bad_options_name_the_option(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as raised:
        config(**values)
    assert message in str(raised.value)


def test_a_missing_url_is_named() -> None:
    with pytest.raises(SpecError, match="--url: required"):
        BenchConfig.from_options({"model": "lab"})


def test_python_callers_get_the_same_errors() -> None:
    with pytest.raises(SpecError, match="--concurrency: Input should be greater than or equal"):
        BenchConfig(url=URL, model="lab", concurrency=0)
    with pytest.raises(SpecError, match="--cancel FRACTION and --cancel-after"):
        BenchConfig(url=URL, model="lab", cancel=0.5)


def test_the_plan_builds_the_run(tmp_path: Path) -> None:
    plan = plan_bench(config(concurrency=4, output=str(tmp_path / "r.jsonl"), max_tokens=8))
    assert isinstance(plan.schedule, ClosedLoop)
    assert plan.options.max_requests == DEFAULT_REQUESTS
    assert plan.workload.max_tokens == 8
    assert plan.read_timeout_s == 120.0
    assert plan.baseline is None
    assert [r.metric for r in plan.gate_rules][:2] == ["p99_of_p99_s", "p99_of_worst_gap_s"]
    timed = plan_bench(config(rate=2.5, duration="10s", output=str(tmp_path / "r.jsonl")))
    assert isinstance(timed.schedule, OpenLoop)
    assert timed.options.max_requests is None
    assert timed.options.duration_ns == 10 * 10**9


def test_a_sweep_plans_one_schedule_per_load(tmp_path: Path) -> None:
    out = str(tmp_path / "r.jsonl")
    rates = plan_bench(config(sweep="rates=1,2", concurrency=8, output=out))
    assert rates.schedule is None
    by_rate = rates.schedule_for(2.0)
    assert isinstance(by_rate, OpenLoop)
    assert (by_rate.rate, by_rate.max_concurrency) == (2.0, 8)
    streams = plan_bench(config(sweep="concurrency=1,4", output=out)).schedule_for(4.0)
    assert isinstance(streams, ClosedLoop)
    assert streams.concurrency == 4


def test_the_plan_reads_what_the_options_name(tmp_path: Path) -> None:
    out = str(tmp_path / "r.jsonl")
    with pytest.raises(SpecError, match="SS_UNSET is empty"):
        plan_bench(config(api_key_env="SS_UNSET", output=out), environ={})
    keyed = plan_bench(config(api_key_env="SS_KEY", output=out), environ={"SS_KEY": "sk-x"})
    assert keyed.endpoint.api_key == "sk-x"
    with pytest.raises(SpecError, match="the folder"):
        plan_bench(config(output=str(tmp_path / "missing" / "r.jsonl")))
    with pytest.raises(InputError):
        plan_bench(config(prompts=str(tmp_path / "none.jsonl"), output=out))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no streams in this run"):
        plan_bench(config(gate=str(empty), output=out))
    baseline = tmp_path / "base.jsonl"
    write_jsonl(baseline, steady_run())
    gated = plan_bench(config(gate=str(baseline), output=out))
    assert gated.baseline is not None
    assert len(gated.baseline.timelines) == 10
    unsent = plan_bench(config(request_id_header="none", output=out))
    assert unsent.endpoint.request_id_header is None


def test_every_field_is_an_option_with_its_flag() -> None:
    command = get_command(app).commands["bench"]  # type: ignore[attr-defined]
    shown = {param.name: param for param in command.params}
    for name, info in BenchConfig.model_fields.items():
        flag = next(m for m in info.metadata if isinstance(m, Flag))
        param = shown[name]
        assert param.help == flag.help  # type: ignore[attr-defined]
        if flag.argument:
            assert param.param_type_name == "argument"
        else:
            assert (list(flag.names) or [option_name(name)])[0] in param.opts
    assert set(shown) == {*BenchConfig.model_fields, "live", "json_output"}
    assert shown["stall_threshold"].default == "400ms"  # nanoseconds shown as typed
    assert shown["timeout"].default == "120s"


def test_docs_describe_every_option() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "bench.md").read_text(encoding="utf-8")
    for name, info in BenchConfig.model_fields.items():
        flag = next(m for m in info.metadata if isinstance(m, Flag))
        if not flag.argument:
            assert f"`{(list(flag.names) or [option_name(name)])[0]}" in docs, name
