from __future__ import annotations

import pytest

from steadystream import SpecError
from steadystream._units import format_duration, parse_duration, parse_size


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


@pytest.mark.parametrize("text", ["9" * 5000, "9" * 20 + "GiB", "9223372036854775808"])
def test_a_size_past_what_is_held_is_a_spec_error_naming_it(text: str) -> None:
    # 5,000 digits was int()'s own ValueError (its 4,300-digit limit): a traceback.
    with pytest.raises(SpecError, match=r"limits\.buffer_bytes: .* is larger than the largest"):
        parse_size(text, name="limits.buffer_bytes")


def test_the_largest_size_held_is_read() -> None:
    assert parse_size("9223372036854775807") == 2**63 - 1
    assert parse_size("0" * 50 + "4KiB") == 4096
