"""What every configuration shares: durations as people write them, one error describer."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from steadystream._validation import Duration, accepted_keys, describe_errors, duration_text


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wait: Duration = 1_000_000
    mode: Literal["a", "b"] = "a"


class _Root(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    inner: _Inner = _Inner()
    items: list[_Inner] = Field(default_factory=list, min_length=1)


def _message(data: object, **kwargs: object) -> str:
    with pytest.raises(ValidationError) as raised:
        _Root.model_validate(data)
    return describe_errors(raised.value, "test.yaml", _Root, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "ns"), [("400ms", 400_000_000), ("1.5s", 1_500_000_000), (2, 2_000_000_000)]
)
def test_durations_read_as_typed(text: object, ns: int) -> None:
    assert _Inner.model_validate({"wait": text}).wait == ns


@pytest.mark.parametrize("bad", [True, "soon", [1], None])
def test_bad_durations_say_what_a_duration_is(bad: object) -> None:
    message = _message({"name": "x", "items": [{}], "inner": {"wait": bad}})
    assert message.startswith("test.yaml: key 'inner.wait': ")
    assert "duration" in message
    assert "Value error" not in message


def test_each_kind_of_problem_names_its_key() -> None:
    message = _message({"inner": {"mode": "c", "extra": 1}, "items": [{"wait": "x"}]})
    assert "key 'name': required" in message
    assert "key 'inner.mode': got 'c' (accepted: 'a' or 'b')" in message
    assert "key 'inner.extra': unknown key (accepted: wait, mode)" in message
    assert "key 'items.0.wait': cannot read 'x' as a duration" in message


def test_unknown_keys_at_the_top_list_the_extra_keys() -> None:
    message = _message({"name": "x", "items": [{}], "nme": 1}, extra_keys=("preset",))
    assert "key 'nme': unknown key (accepted: name, inner, items, preset)" in message
    assert accepted_keys(_Root, ["items", "0"]) == ["wait", "mode"]


def test_a_list_whose_items_failed_is_not_also_too_short() -> None:
    assert "too_short" not in _message({"name": "x", "items": [{"mode": "z"}]})
    assert "key 'items': List should have at least 1 item" in _message({"name": "x", "items": []})


def test_names_can_be_options() -> None:
    message = _message({"items": [{}]}, name=lambda loc: "--" + "-".join(loc))
    assert message == "test.yaml: --name: required"


@pytest.mark.parametrize(
    ("ns", "text"),
    [(400_000_000, "400ms"), (120_000_000_000, "120s"), (1_500_000_000, "1500ms"), (7, "7ns")],
)
def test_duration_text_reads_back_exactly(ns: int, text: str) -> None:
    assert duration_text(ns) == text
    assert _Inner.model_validate({"wait": text}).wait == ns
