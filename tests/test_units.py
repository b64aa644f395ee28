from __future__ import annotations

import pytest

from steadystream import SpecError
from steadystream._units import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("400ms", 400_000_000),
        ("1.5s", 1_500_000_000),
        ("500us", 500_000),
        ("2", 2_000_000_000),
        ("250µs", 250_000),
        (" 33 ms ", 33_000_000),
        ("2m", 120_000_000_000),
        ("10ns", 10),
    ],
)
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "fast", "10 parsecs", "ms", "-5ms", "1e999s"])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(SpecError, match="--stall-threshold"):
        parse_duration(text, name="--stall-threshold")


def test_format_duration() -> None:
    assert format_duration(33_000_000) == "33.0ms"
    assert format_duration(2_000_000_000) == "2.00s"
    assert format_duration(850_000) == "850µs"
    assert format_duration(None) == "—"
